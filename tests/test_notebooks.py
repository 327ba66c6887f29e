"""The notebooks of notebooks/: each .ipynb is in sync with its jupytext
py:percent source and carries no outputs, and each runs end to end on CPU at
the tiny preset (GLOMO_JAX_NOTEBOOK_PRESET=tiny, built-in synthetic corpus)."""
import base64
import glob
import os

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient

from conftest import REPO, xla_flags_with_devices

SOURCES = sorted(glob.glob(os.path.join(REPO, "notebooks", "*.py")))


def cells(notebook):
  return [(c.cell_type, c.source.strip()) for c in notebook.cells]


def test_there_are_notebooks():
  assert [os.path.basename(p) for p in SOURCES] == ["pretrain_export_look.py",
                                                    "use_exported_graphs.py"]


@pytest.mark.parametrize("source", SOURCES, ids=os.path.basename)
def test_ipynb_is_in_sync_with_its_source_and_stripped(source):
  ipynb = source[:-3] + ".ipynb"
  assert os.path.exists(ipynb), f"run: jupytext --sync {os.path.relpath(source, REPO)}"
  paired, stored = jupytext.read(source), nbformat.read(ipynb, as_version=4)
  assert cells(stored) == cells(paired), (
      f"{os.path.relpath(ipynb, REPO)} differs from its source: "
      f"jupytext --sync {os.path.relpath(source, REPO)}")
  for cell in stored.cells:
    if cell.cell_type == "code":
      assert cell.outputs == [] and cell.execution_count is None, "strip the outputs"
  assert stored.metadata["jupytext"]["formats"] == "ipynb,py:percent"


def outputs(notebook, kind):
  """The text (kind 'text') or PNG bytes (kind 'png') of every output."""
  out = []
  for cell in notebook.cells:
    for o in cell.get("outputs", []):
      if kind == "text" and o.output_type == "stream":
        out.append(o.text)
      elif kind == "text" and "text/plain" in o.get("data", {}):
        out.append(o.data["text/plain"])
      elif kind == "png" and "image/png" in o.get("data", {}):
        out.append(base64.b64decode(o.data["image/png"]))
  return out


def execute(name, tmp_path, monkeypatch):
  monkeypatch.setenv("GLOMO_JAX_NOTEBOOK_PRESET", "tiny")
  monkeypatch.setenv("XLA_FLAGS", xla_flags_with_devices(1))
  notebook = nbformat.read(os.path.join(REPO, "notebooks", name), as_version=4)
  NotebookClient(notebook, timeout=600, kernel_name="python3",
                 resources={"metadata": {"path": str(tmp_path)}}).execute()
  return notebook


def test_pretrain_export_look_runs_and_draws(tmp_path, monkeypatch):
  notebook = execute("pretrain_export_look.ipynb", tmp_path, monkeypatch)
  text = "".join(outputs(notebook, "text"))
  assert "steps/s" in text and "ETA" in text           # progress shown while training
  assert "held-out loss" in text and "18 pieces" in text
  assert "orbax" not in text.lower()                     # library chatter filtered
  pngs = outputs(notebook, "png")
  assert len(pngs) == 1 and pngs[0].startswith(b"\x89PNG")
  assert os.path.exists(tmp_path / "runs/notebook_pretrain/export/glomo_export.json")


def test_use_exported_graphs_trains_every_mode(tmp_path, monkeypatch):
  notebook = execute("use_exported_graphs.ipynb", tmp_path, monkeypatch)
  text = "".join(outputs(notebook, "text"))
  for mode in ("none", "uniform", "glomo"):
    assert f"{mode}: validation accuracy" in text
