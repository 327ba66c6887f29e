"""experiments.ablations end to end at a tiny preset: each ablation pretrained
and measured (loss, dead heads, syntax, transfer), the table, and resume."""
import json
import os
import subprocess
import sys

from conftest import REPO

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


def test_ablation_runner_measures_each_ablation_and_resumes(tmp_path):
  conllu = tmp_path / "t.conllu"
  conllu.write_text(CONLLU, encoding="utf-8")
  root = tmp_path / "ablations"
  cmd = [sys.executable, "-m", "experiments.ablations",
         "--pretrain_config=experiments/configs/demo.py:tiny", f"--root={root}",
         "--ablations=full,no_unit_level", "--steps=3", f"--conllu={conllu}",
         "--transfer_config=experiments/configs/agreement.py:tiny", "--seeds=0", "--",
         "--config.optim.steps=2"]
  out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
  assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
  tables = [{line.split(" | ")[0][2:]: line for line in block.splitlines()
             if line.startswith("| ")}
            for block in (root / "ablations.md").read_text().split("\n\n")]
  rows, health = tables[0], tables[2]
  assert {"full", "no_unit_level", "uniform graph (at transfer)"} <= set(rows)
  assert "not comparable" in rows["no_unit_level"] and "not comparable" not in rows["full"]
  unit = json.loads((root / "no_unit_level" / "ablation.json").read_text())
  assert unit["step"] == 3 and unit["heads"] == 2 * 2 * 4
  # dead heads at every evaluation, the last one the record's own
  assert [h["step"] for h in unit["health_by_step"]][-1] == 3
  assert unit["health_by_step"][-1]["dead_heads"] == unit["dead_heads"]
  assert health["ablation"].endswith("| step 3 |")
  assert health["full"].count(" / ") == len(unit["health_by_step"])
  assert unit["syntax_sentences"] == 1 and 0 <= unit["syntax"]["uuas"] <= 1
  assert 0 <= unit["empty_rows"] <= 1
  config = json.loads((root / "no_unit_level" / "config.json").read_text())
  assert config["model"]["objective"] == "sentence" and config["num_steps"] == 3
  assert os.path.exists(root / "no_unit_level" / "transfer" / "embeddings_s0" /
                        "results.json")
  assert os.path.exists(root / "uniform" / "uniform_s0" / "results.json")
  again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
  assert again.returncode == 0 and again.stdout.count("done already") == 3
  bad = subprocess.run(cmd[:5] + ["--ablations=full,no_such"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
  assert bad.returncode != 0 and "no_such" in bad.stderr.strip().splitlines()[-1]
