"""experiments.predictor_table: rows parsed and applied to the config, and
end to end at a tiny preset (the paper's ablations, fixed graphs, the
table's columns, transfer, resume, a bad row as one line)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO
from experiments.table_format import losses_comparable, quality_table
from experiments.table_rows import parse_row, row_config, table_rows

# words of the built-in language, one piece each for the demo's word tokenizer
CONLLU = """# text = the dog near the cats runs .
1\tthe\t_\t_\t_\t_\t2\tdet\t_\t_
2\tdog\t_\t_\t_\t_\t6\tnsubj\t_\t_
3\tnear\t_\t_\t_\t_\t5\tcase\t_\t_
4\tthe\t_\t_\t_\t_\t5\tdet\t_\t_
5\tcats\t_\t_\t_\t_\t2\tnmod\t_\t_
6\truns\t_\t_\t_\t_\t0\troot\t_\t_
7\t.\t_\t_\t_\t_\t6\tpunct\t_\t_
"""


def test_rows_are_parsed_and_applied_to_the_config():
  from glomo_jax.pretraining import PretrainConfig  # noqa: PLC0415
  from glomo_jax.train.config import LoopOptions  # noqa: PLC0415
  assert parse_row("deep: model.key_layers=4 optimizer=sgd clip_norm=0.25 x=a/b") == (
      "deep", {"model.key_layers": 4, "optimizer": "sgd", "clip_norm": 0.25, "x": "a/b"})
  with pytest.raises(ValueError, match="NAME: field=value"):
    parse_row("no colon")
  with pytest.raises(ValueError, match="is not field=value"):
    parse_row("a: key_layers")
  base = PretrainConfig(loop=LoopOptions(num_steps=100)).to_dict()
  config = row_config(base, {"model.key_layers": 4, "steps_fraction": 0.45,
                             "graph_source": "export",
                             "graph_export": "{root}/sgd_s{seed}/export"}, 1500, "/r", 2)
  assert (config.model.key_layers, config.loop.num_steps, config.seed) == (4, 675, 2)
  assert config.graph_export == "/r/sgd_s2/export" and not config.export
  assert row_config(base, {}, None, "/r", 0).loop.num_steps == 100
  with pytest.raises(ValueError, match="not a config field"):
    row_config(base, {"model.key_layer": 4}, None, "/r", 0)
  with pytest.raises(ValueError, match="not a section"):
    row_config(base, {"optimizer.lr": 4}, None, "/r", 0)
  # every optimiser row names its optimiser and graphs whatever the base preset's
  from experiments.configs import wiki_cpu  # noqa: PLC0415
  for preset, (optimizer, lr, momentum, clip, prior) in {
      "": ("sgd", 8.0, 0.2, 0.25, 16), "authors": ("sgd", 8.0, 0.2, 0.25, 0),
      "adam": ("adam", 1e-3, 0.2, 1.0, 0)}.items():
    base = PretrainConfig.from_dict(wiki_cpu.get_config(preset).to_dict()).to_dict()
    for name, want in {"adam": ("adam", 1e-3, 1.0, 0), "sgd": ("sgd", 8.0, 0.25, 0),
                       "adam_clip0.25": ("adam", 1e-3, 0.25, 0),
                       "sgd_prior_local": ("sgd", 8.0, 0.25, 16)}.items():
      rows = table_rows(["optimizer", "distance_prior"], [name], [])
      c = row_config(base, rows[name], None, "/r", 0)
      assert (c.optimizer, c.learning_rate, c.clip_norm, c.model.distance_prior) == want, (
          preset, name)
    c = PretrainConfig.from_dict(base)
    assert (c.optimizer, c.learning_rate, c.momentum, c.clip_norm, c.model.distance_prior) == (
        optimizer, lr, momentum, clip, prior)
  # the preset is the 'sgd_prior_local' row of the table, ':authors' the 'sgd' row
  base = PretrainConfig.from_dict(wiki_cpu.get_config("").to_dict())
  authors = PretrainConfig.from_dict(wiki_cpu.get_config("authors").to_dict())
  for preset, row, name in ((base, "distance_prior", "sgd_prior_local"),
                            (authors, "optimizer", "sgd")):
    for start in (base, authors):
      assert preset == row_config(start.to_dict(), table_rows([row], [name], [])[name],
                                  None, "/r", 0)
  base = base.to_dict()
  # held-out losses compare within one objective and context length
  model = PretrainConfig().model
  assert losses_comparable(row_config(base, {"model.decoupled": False}, None, "/r", 0).model, model)
  for change in ({"model.objective": "sentence"}, {"model.context_length": 1}):
    assert not losses_comparable(row_config(base, change, None, "/r", 0).model, model)
  rows = table_rows(["ablations"], ["full"], ["mine: seed=3"])
  assert list(rows) == ["full", "mine"]
  with pytest.raises(ValueError, match="unknown row set"):
    table_rows(["nope"], None, [])
  with pytest.raises(ValueError, match=r"--only names rows \['no_such'\]"):
    table_rows(["ablations"], ["full", "no_such"], [])


def test_table_runs_rows_measures_them_and_resumes(tmp_path):
  conllu = tmp_path / "t.conllu"
  conllu.write_text(CONLLU, encoding="utf-8")
  root = tmp_path / "table"
  cmd = [sys.executable, "-m", "experiments.predictor_table",
         "--pretrain_config=experiments/configs/demo.py:tiny", f"--root={root}", "--steps=3",
         "--rows=ablations", "--only=full",
         "--row=planted: graph_source=planted",
         "--row=frozen: graph_source=export graph_export={root}/full_s{seed}/export",
         f"--conllu={conllu}", "--classify_config=experiments/configs/agreement.py:tiny",
         "--seeds=0", "--", "--config.loop.num_steps=2"]
  out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
  blocks = [block for block in (root / "table.md").read_text().split("\n\n")
            if block.startswith("| ")]

  def table(header):      # {first cell: line} of the table whose header starts so
    block = next(b for b in blocks if b.startswith(header))
    return {line.split(" | ")[0][2:]: line for line in block.splitlines()}
  rows, health = table("| row | seeds | held-out loss"), table("| row | seed | step")
  transfer, arc_rows = table("| row | transfer accuracy"), table("| row | planted arcs")
  assert {"full", "planted", "frozen"} <= set(rows)
  assert "not comparable" not in rows["full"]
  full = json.loads((root / "full_s0" / "record.json").read_text())
  other = quality_table({"ctx1": [{**full, "comparable": False}]})
  assert f"({full['heldout_loss']:.3f}, not comparable)" in other
  assert full["step"] == 3 and full["heads"] == 2 * 2 * 4 and full["tokens_seen"] > 0
  assert [h["step"] for h in full["health_by_step"]][-1] == 3
  assert full["health_by_step"][-1]["dead_heads"] == full["dead_heads"]
  assert full["dead_heads_batch_stats"] is not None
  assert 0 <= full["empty_rows"] <= 1 and 0 < full["near_uniform_fw"] <= 1
  assert full["distance_uniform"] > 1
  assert full["syntax"]["sentences"] == 1 and 0 <= full["syntax"]["mean"]["uuas"] <= 1
  assert full["syntax"]["best_head"]["name"].split()[0] in ("fw", "bw")
  assert health["row"].endswith("| step 3 |") and "planted" not in health
  # the planted arcs are the graphs: the row predicting each arc's target
  # puts all its weight on the arc's source (head 0)
  planted = json.loads((root / "planted_s0" / "record.json").read_text())
  arcs = json.loads((root / "planted_s0" / "arc_scores.json").read_text())
  assert arcs["final"]["predicting_best"] == pytest.approx(1.0)
  assert arcs["final"]["predicting_best_head"] == 0
  assert planted["export"] is None and "syntax" not in planted
  assert planted["arcs"]["final"]["best"] == pytest.approx(1.0)
  assert 0 <= full["arcs"]["final"]["best"] <= 1 and "untrained" in full["arcs"]
  assert {"full", "planted", "frozen"} <= set(arc_rows)
  assert planted["empty_rows"] < full["empty_rows"] or planted["dead_heads"] == 0
  frozen = json.loads((root / "frozen_s0" / "config.json").read_text())
  assert frozen["graph_export"] == f"{root}/full_s0/export"
  assert {"full", "uniform graph (at transfer)"} <= set(transfer)
  assert os.path.exists(root / "full_s0" / "transfer" / "embeddings_s0" / "results.json")
  again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
  assert again.returncode == 0 and again.stdout.count("done already") == 2, again.stdout
