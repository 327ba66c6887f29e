"""Named sets of rows for `experiments.predictor_table`: each row is a name
and the changes it makes to the pretraining config (dotted field paths into
`PretrainConfig`, e.g. 'model.key_layers').

Special keys (not config fields):
* 'steps_fraction': the row trains for this share of the table's --steps
  (equal compute for a row whose step costs more);
* a string value may name '{root}' (the table's directory), e.g. the export
  of an earlier row for graph_source='export'.

Rows run in the order given; a row that reads another row's export comes
after it.
"""

# The authors' graphs: no distance prior, whatever the base preset's.
AUTHORS_GRAPHS = {"model.distance_prior": 0, "model.distance_prior_init": 0.0}
# The authors' optimiser (docs/design.md §6): SGD lr 8, momentum 0.2, global-norm clip 0.25,
# and their graphs (no distance prior), whatever the base preset's.
AUTHORS_SGD = {"optimizer": "sgd", "learning_rate": 8.0, "momentum": 0.2, "clip_norm": 0.25,
               **AUTHORS_GRAPHS}
# wiki_cpu's earlier preset (`wiki_cpu.py:adam`): Adam 1e-3, global-norm clip 1.0.
ADAM = {"optimizer": "adam", "learning_rate": 1e-3, "clip_norm": 1.0, **AUTHORS_GRAPHS}


def _with(base: dict, **changes) -> dict:
  return {**base, **changes}


ROW_SETS = {
    # Root causes of dead heads and unstructured graphs (issue: a predictor
    # that learns). Every row names its optimiser and graph prior, whatever
    # the base config's.
    "optimizer": {
        "adam": ADAM,
        "adam_lr3e-4": _with(ADAM, learning_rate=3e-4),
        "adam_lr3e-3": _with(ADAM, learning_rate=3e-3),
        "adam_clip0.25": _with(ADAM, clip_norm=0.25),
        "sgd": AUTHORS_SGD,
        "sgd_noclip": _with(AUTHORS_SGD, clip_norm=0.0),
    },
    "structure": {
        "sgd_every_position": _with(AUTHORS_SGD, **{"model.sample_positions": 0},
                                    steps_fraction=0.45),
        "sgd_bn_uniform": _with(AUTHORS_SGD, **{"model.bn_scale_init": "uniform"}),
        "sgd_depth4": _with(AUTHORS_SGD, **{"model.key_layers": 4, "model.query_layers": 4}),
        "adam_bn_uniform": _with(ADAM, **{"model.bn_scale_init": "uniform"}),
    },
    # What the objective rewards: the feature predictor and decoder trained
    # on fixed graphs (needs the 'sgd' row's export first).
    "fixed_graphs": {
        "sgd_fixed_uniform": _with(AUTHORS_SGD, graph_source="uniform"),
        "sgd_fixed_previous": _with(AUTHORS_SGD, graph_source="previous"),
        "sgd_fixed_learned": _with(AUTHORS_SGD, graph_source="export",
                                   graph_export="{root}/sgd_s{seed}/export"),
    },
    # Beyond the paper: a learned prior over distances in the graph
    # normalisation (ModelConfig.distance_prior), starting flat or at 1/d.
    "distance_prior": {
        "sgd_prior": _with(AUTHORS_SGD, **{"model.distance_prior": 16}),
        "sgd_prior_local": _with(AUTHORS_SGD, **{"model.distance_prior": 16,
                                                 "model.distance_prior_init": 1.0}),
        "adam_prior_local": _with(ADAM, **{"model.distance_prior": 16,
                                           "model.distance_prior_init": 1.0}),
    },
    # The paper's Table 2 (the authors' graphs), at one token budget, with the base
    # config's optimiser.
    "ablations": {
        "full": AUTHORS_GRAPHS,
        "no_decouple": {**AUTHORS_GRAPHS, "model.decoupled": False},
        "no_sparse": {**AUTHORS_GRAPHS, "model.sparsity": "softmax"},
        "no_hierarchical": {**AUTHORS_GRAPHS, "model.num_graph_layers": 1},
        "no_unit_level": {**AUTHORS_GRAPHS, "model.objective": "sentence"},
        "no_sequence": {**AUTHORS_GRAPHS, "model.context_length": 1},
        "scalar_threshold": {**AUTHORS_GRAPHS, "model.threshold": "scalar"},
        "zero_threshold": {**AUTHORS_GRAPHS, "model.threshold": "zero"},
    },
}
