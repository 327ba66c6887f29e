#!/usr/bin/env bash
# Reproduces experiments/RESULTS.md: pretrain the CPU-scale GLoMo on the
# Wikipedia articles of ../shared/data, then IMDB and the MNLI sample for the
# baseline, GLoMo on embeddings and the uniform graph (MNLI: also GLoMo on the
# RNN states), 3 seeds each (about 2.75 hours on 2 cores: pretraining 1 h at
# 2.9 steps/s, MNLI 45 min, IMDB 55 min), SQuAD (baseline, uniform graph, GLoMo
# on embeddings: about 30 min a run; GLoMo on the RNN states: 55 min), and
# images: a pixel predictor pretrained on Tiny ImageNet at 16×16, transferred
# into CIFAR-10 ResNet-18s (baseline, uniform graph, GLoMo). Also: graph
# statistics, the alignment with UD English trees, the ablation table, the
# data-efficiency curve on the built-in language, MNLI's word-vector tables,
# MNLI and IMDB trained longer (about 2.5 hours more), and at the end the predictor
# table, the SST-2 curve and both grids with the preset's predictor. CPU-scale task
# settings: see experiments/results/text_tasks.md. Every step resumes where it stopped.
# Usage: experiments/run_experiments.sh [DATA_DIR] [RUNS_DIR]
set -euo pipefail
DATA=$(realpath -m "${1:-$(dirname "$0")/../../shared/data}")
RUNS=$(realpath -m "${2:-$(dirname "$0")/../runs}")
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
GLOVE="$DATA/glove/glove.6B.100d.top2604.txt.gz"
set -x
# the predictor of the downstream CPU tables: the preset of then (Adam, the
# authors' graphs); the preset now (SGD + the distance prior) is the predictor
# table's and the SST-2 curve's, at the end
$PY -m experiments.pretrain --config=experiments/configs/wiki_cpu.py:adam \
    --config.corpus.pattern="$DATA/wiki_text/enwiki2015_wikiextractor_part[123].jsonl.xz" \
    --workdir="$RUNS/wiki_cpu"
EXPORT="$RUNS/wiki_cpu/export"
$PY -m experiments.graph_stats --export="$EXPORT" \
    --data="$DATA/mnli/mnli_train_subset_9k.jsonl.xz" --field=premise
$PY -m experiments.graph_stats --export="$EXPORT" \
    --data="$DATA/mnli/mnli_train_subset_9k.jsonl.xz" --field=premise --read=words
$PY -m experiments.syntax_alignment --export="$EXPORT" \
    --conllu="$DATA/ud_english_ewt/en_ewt-ud-dev.conllu.gz"
# the ablation table with the dead-head remedies: 8 pretrainings of 1,500 steps
# (the wiki_cpu tokenizer), each measured and transferred into MNLI (1 epoch,
# 3 seeds); about 2 hours
$PY -m experiments.predictor_table --pretrain_config=experiments/configs/wiki_cpu.py:adam --rows=ablations \
    --pretrain_config.corpus.pattern="$DATA/wiki_text/enwiki2015_wikiextractor_part[123].jsonl.xz" \
    --pretrain_config.tokenizer_path="$RUNS/wiki_cpu/tokenizer.model" \
    --pretrain_config.loop.eval_every=250 --pretrain_config.loop.checkpoint_every=500 \
    --root="$RUNS/ablations" --steps=1500 \
    --conllu="$DATA/ud_english_ewt/en_ewt-ud-dev.conllu.gz" \
    --classify_config=experiments/configs/mnli.py --parallel=2 -- \
    --config.files.train="$DATA/mnli/mnli_train_subset_9k.jsonl.xz" --config.glove_path="$GLOVE" \
    --config.graph_cache_dir="$RUNS/ablations/mnli_graph_cache" \
    --config.model.hidden=100 --config.length_multiple=32 \
    --config.loop.epochs=1 --config.loop.eval_every=127 --config.loop.patience=100
# the controlled case: the built-in language, whose arcs are known (the demo's
# predictor; 60 short runs, about 30 min)
$PY -m experiments.demo --workdir="$RUNS/demo" --variants=
$PY -m experiments.data_efficiency --export="$RUNS/demo/export" \
    --root="$RUNS/data_efficiency" --parallel=2
# MNLI: one run builds the graph cache before the parallel runs share it
[ -f "$RUNS/grid/mnli/embeddings_s0/results.json" ] || \
  $PY -m experiments.classify --config=experiments/configs/mnli.py \
    --config.variant=embeddings --workdir="$RUNS/grid/mnli_cache_build" \
    --config.files.train="$DATA/mnli/mnli_train_subset_9k.jsonl.xz" \
    --config.predictor_export="$EXPORT" --config.graph_cache_dir="$RUNS/grid/mnli_graph_cache" \
    --config.loop.num_steps=1
MNLI=(--config.files.train="$DATA/mnli/mnli_train_subset_9k.jsonl.xz"
      --config.predictor_export="$EXPORT" --config.graph_cache_dir="$RUNS/grid/mnli_graph_cache"
      --config.model.hidden=100 --config.length_multiple=32
      --config.loop.epochs=2 --config.loop.eval_every=127 --config.loop.patience=100)
$PY -m experiments.classify_grid --config=experiments/configs/mnli.py \
    --root="$RUNS/grid/mnli" --variants=embeddings,rnn,baseline,uniform --seeds=0,1,2 \
    --parallel=2 -- "${MNLI[@]}" --config.glove_path="$GLOVE"
# the baseline of the RNN-states variant's depth (two input-encoding BiLSTMs)
$PY -m experiments.classify_grid --config=experiments/configs/mnli.py \
    --root="$RUNS/grid/mnli_deep_baseline" --variants=baseline --seeds=0,1,2 --parallel=2 -- \
    "${MNLI[@]}" --config.glove_path="$GLOVE" --config.model.rnn_layers=2
# word vectors: GloVe extended by Wikipedia vectors (6 min, one core), then MNLI with
# no vectors, and with each table at GloVe's scale and scaled to the random rows' (× 0.17)
WIKI_GLOVE="$RUNS/word_vectors/glove_wiki.100d.txt.gz"
[ -f "$WIKI_GLOVE" ] || $PY -m experiments.word_vectors \
    --corpus="$DATA/wiki_text/enwiki2015_wikiextractor_part[1-8].jsonl.xz" \
    --glove="$GLOVE" --output="$WIKI_GLOVE"
$PY -m experiments.classify_grid --config=experiments/configs/mnli.py \
    --root="$RUNS/grid/mnli_no_glove" --variants=baseline,embeddings --parallel=2 -- "${MNLI[@]}"
$PY -m experiments.classify_grid --config=experiments/configs/mnli.py \
    --root="$RUNS/grid/mnli_glove_oov058" --variants=baseline --parallel=2 -- "${MNLI[@]}" \
    --config.glove_path="$GLOVE" --config.model.oov_scale=0.58
$PY -m experiments.classify_grid --config=experiments/configs/mnli.py \
    --root="$RUNS/grid/mnli_glove_scaled" --variants=baseline --parallel=2 -- "${MNLI[@]}" \
    --config.glove_path="$GLOVE" --config.model.glove_scale=0.17
$PY -m experiments.classify_grid --config=experiments/configs/mnli.py \
    --root="$RUNS/grid/mnli_glove_wiki" --variants=baseline,embeddings --parallel=2 -- \
    "${MNLI[@]}" --config.glove_path="$WIKI_GLOVE"
$PY -m experiments.classify_grid --config=experiments/configs/mnli.py \
    --root="$RUNS/grid/mnli_glove_wiki_scaled" --variants=baseline,embeddings,uniform --parallel=2 -- \
    "${MNLI[@]}" --config.glove_path="$WIKI_GLOVE" --config.model.glove_scale=0.17
# those runs trained on to 6 epochs: copies resumed from their last checkpoint
for run in "$RUNS"/grid/mnli_glove_wiki_scaled/*_s?; do
  copy="$RUNS/grid/mnli_glove_wiki_scaled_long/$(basename "$run")"
  [ -d "$copy" ] || { mkdir -p "$RUNS/grid/mnli_glove_wiki_scaled_long"; cp -a "$run" "$copy"; rm -f "$copy/results.json"; }
done
$PY -m experiments.classify_grid --config=experiments/configs/mnli.py \
    --root="$RUNS/grid/mnli_glove_wiki_scaled_long" --variants=baseline,embeddings,uniform \
    --parallel=2 -- "${MNLI[@]}" --config.glove_path="$WIKI_GLOVE" --config.model.glove_scale=0.17 \
    --config.loop.epochs=6
# GLoMo on the RNN states and the baseline of its depth, 6 epochs from the start
$PY -m experiments.classify_grid --config=experiments/configs/mnli.py \
    --root="$RUNS/grid/mnli_glove_wiki_scaled_rnn" --variants=rnn --parallel=2 -- "${MNLI[@]}" \
    --config.glove_path="$WIKI_GLOVE" --config.model.glove_scale=0.17 --config.loop.epochs=6
$PY -m experiments.classify_grid --config=experiments/configs/mnli.py \
    --root="$RUNS/grid/mnli_glove_wiki_scaled_deep_baseline" --variants=baseline --parallel=2 -- \
    "${MNLI[@]}" --config.glove_path="$WIKI_GLOVE" --config.model.glove_scale=0.17 \
    --config.loop.epochs=6 --config.model.rnn_layers=2
IMDB=(--config.files.train="$DATA/imdb/imdb_train.jsonl.gz"
      --config.glove_path="$GLOVE" --config.predictor_export="$EXPORT"
      --config.graph_cache_dir="$RUNS/grid/imdb_graph_cache" --config.max_words=128
      --config.max_train_examples=8000 --config.length_multiple=32)
# one run builds the graph cache (train + validation, 7.2 GB float16, 5 min) before
# the parallel runs share it
[ -f "$RUNS/grid/imdb/embeddings_s0/results.json" ] || \
  $PY -m experiments.classify --config=experiments/configs/imdb.py \
    --config.variant=embeddings --workdir="$RUNS/grid/imdb_cache_build" \
    "${IMDB[@]}" --config.loop.num_steps=1
$PY -m experiments.classify_grid --config=experiments/configs/imdb.py \
    --root="$RUNS/grid/imdb" --variants=embeddings,baseline,uniform --seeds=0,1,2 \
    --parallel=2 -- "${IMDB[@]}" \
    --config.loop.epochs=2 --config.loop.eval_every=125 --config.loop.patience=100
# IMDB trained on to 4 epochs: copies of those runs, resumed from their last checkpoint
for run in "$RUNS"/grid/imdb/*_s?; do
  copy="$RUNS/grid/imdb_long/$(basename "$run")"
  [ -d "$copy" ] || { mkdir -p "$RUNS/grid/imdb_long"; cp -a "$run" "$copy"; rm -f "$copy/results.json"; }
done
$PY -m experiments.classify_grid --config=experiments/configs/imdb.py \
    --root="$RUNS/grid/imdb_long" --variants=embeddings,baseline,uniform --seeds=0,1,2 \
    --parallel=2 -- "${IMDB[@]}" \
    --config.loop.epochs=4 --config.loop.eval_every=125 --config.loop.patience=100
# IMDB with the Wikipedia-extended GloVe scaled × 0.17 (MNLI's best table), 4 epochs
$PY -m experiments.classify_grid --config=experiments/configs/imdb.py \
    --root="$RUNS/grid/imdb_glove_wiki_scaled" --variants=embeddings,baseline,uniform --seeds=0,1,2 \
    --parallel=2 -- "${IMDB[@]}" --config.glove_path="$WIKI_GLOVE" --config.model.glove_scale=0.17 \
    --config.loop.epochs=4 --config.loop.eval_every=125 --config.loop.patience=100
# SQuAD: 20k training questions, dev = the 24 shared dev articles; runs share one
# compilation cache (the first run of a variant compiles its 13 step shapes) and,
# for GLoMo, one graph cache (built by its first run)
SQUAD=(--config.files.train="$DATA/squad_v1.1/squad_train-v1.1_rebuilt.json.xz"
       --config.files.dev="$DATA/squad_v1.1/squad_dev_v1.1_part1_reconstructed.json.gz"
       --config.glove_path="$GLOVE" --config.predictor_export="$EXPORT"
       --config.graph_cache_dir="$RUNS/grid/squad_graph_cache"
       --compilation_cache_dir="$RUNS/grid/squad_compile_cache")
$PY -m experiments.classify_grid --entry=squad --config=experiments/configs/squad.py:cpu \
    --root="$RUNS/grid/squad" --variants=baseline,uniform,embeddings,rnn --seeds=0,1,2 \
    -- "${SQUAD[@]}"
# Images: pixel pretraining (16×16 Tiny ImageNet), the Fig. 4 drawing, then
# CIFAR-10 (20k training images: 16,000 train / 4,000 validation)
$PY -m experiments.pretrain_images --config=experiments/configs/images_pretrain.py:cpu \
    --config.images.location="$DATA/tiny_imagenet32/tiny_imagenet_train32_25k.npz" \
    --workdir="$RUNS/images_cpu"
CIFAR_TRAIN="$DATA/cifar10/cifar10_train20k_from_jpeg.npz"
$PY -m experiments.plot_pixel_edges --export="$RUNS/images_cpu/export" \
    --images="$CIFAR_TRAIN" --index=7 --pixel=9,8 --downsample=2 \
    --out="$RUNS/images_cpu/pixel_edges.png"
$PY -m experiments.graph_stats --export="$RUNS/images_cpu/export" --images="$CIFAR_TRAIN" \
    --downsample=2
$PY -m experiments.classify_grid --entry=cifar --config=experiments/configs/cifar.py:cpu \
    --root="$RUNS/grid/cifar" --variants=baseline,uniform,glomo --seeds=0,1,2 -- \
    --config.train.location="$CIFAR_TRAIN" --config.predictor_export="$RUNS/images_cpu/export"
# The predictor table's rows at 1,500 steps and the preset at 10,000 (issue 45),
# then the SST-2 learning curve with the preset's predictor (about 2 h on 2 cores)
WIKI=(--pretrain_config=experiments/configs/wiki_cpu.py
      --pretrain_config.corpus.pattern="$DATA/wiki_text/enwiki2015_wikiextractor_part[123].jsonl.xz"
      --conllu="$DATA/ud_english_ewt/en_ewt-ud-dev.conllu.gz"
      --select_conllu="$DATA/ud_english_ewt/en_ewt-ud-train.conllu.gz")
$PY -m experiments.predictor_table "${WIKI[@]}" --pretrain_config.loop.eval_every=250 \
    --root="$RUNS/table_1500" --steps=1500 --rows=optimizer,fixed_graphs,distance_prior,structure \
    --only=adam,sgd,sgd_prior,sgd_prior_local,sgd_fixed_uniform,sgd_fixed_previous,sgd_fixed_learned,sgd_bn_uniform,sgd_depth4
$PY -m experiments.predictor_table "${WIKI[@]}" --pretrain_config.loop.eval_every=250 \
    --root="$RUNS/table_1500" --steps=1500 --rows=optimizer,distance_prior,fixed_graphs \
    --only=sgd,sgd_prior_local,sgd_fixed_previous --pretrain_seeds=0,1,2
$PY -m experiments.predictor_table "${WIKI[@]}" --root="$RUNS/table_10000" --steps=10000 \
    --rows=distance_prior --only=sgd_prior_local --pretrain_seeds=0
$PY -m experiments.data_efficiency --task=sst2 --export="$RUNS/table_10000/sgd_prior_local_s0/export" \
    --root="$RUNS/curve_sst2" --sizes=500,1000,2000,5000 --seeds=0,1,2,3,4 --steps=600 --parallel=2 -- \
    --config.files.train="$DATA/sst2/sst2_train.tsv.gz" --config.files.test="$DATA/sst2/sst2_dev.tsv.gz" \
    --config.glove_path="$GLOVE"
# the IMDB and MNLI grids again with the preset's predictor (about 1.5 h each on 2 cores)
PRESET_EXPORT="$RUNS/table_10000/sgd_prior_local_s0/export"
$PY -m experiments.classify_grid --config=experiments/configs/imdb.py \
    --root="$RUNS/grid_preset/imdb" --variants=embeddings,baseline,uniform --seeds=0,1,2 --parallel=2 -- \
    "${IMDB[@]}" --config.predictor_export="$PRESET_EXPORT" \
    --config.graph_cache_dir="$RUNS/grid_preset/imdb_graph_cache" --config.loop.epochs=4 \
    --config.loop.eval_every=125 --config.loop.patience=100
$PY -m experiments.classify_grid --config=experiments/configs/mnli.py \
    --root="$RUNS/grid_preset/mnli" --variants=embeddings,baseline,uniform --seeds=0,1,2 --parallel=2 -- \
    "${MNLI[@]}" --config.glove_path="$WIKI_GLOVE" --config.model.glove_scale=0.17 --config.loop.epochs=6 \
    --config.predictor_export="$PRESET_EXPORT" --config.graph_cache_dir="$RUNS/grid_preset/mnli_graph_cache"
