"""The DP engine's layer types: one module each under stages/finetune/privacy/layers/, registered once, and a new
layer type is one new module there and nothing else."""
import shutil
import subprocess
import sys
import textwrap

import pytest
from testkit.project import ROOT

from stages.finetune.privacy import layers  # noqa: F401  (registers every layer type)
from stages.finetune.privacy.layer import LAYERS, LayerType, register_layer

LAYERS_DIR = ROOT / "stages" / "finetune" / "privacy" / "layers"


def test_every_layer_module_registers_its_type_once():
    modules = sorted(p.stem for p in LAYERS_DIR.glob("*.py") if p.name != "__init__.py")
    assert LAYERS.names() == modules == ["conv1d", "embedding", "layer_norm", "linear", "rms_norm"]
    with pytest.raises(ValueError, match="layer type 'linear' is already registered"):
        register_layer(LayerType("linear", matches=lambda m: False, clipped_sum=lambda *a: {}))


#: a layer type the engine does not know: y = w * x elementwise (its per-example gradient of w: sum over positions
#: of g * x), written as a module of the layers package
SCALE = '''
import torch
from torch import nn

from ..layer import LayerType, norms, register_layer, summed


class Scale(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * self.weight


def grad_sample(layer, activations, backprops):
    x = activations[0]
    gs = (backprops * x).reshape(len(x), -1, x.shape[-1]).sum(1)
    return {layer.weight: gs}


register_layer(LayerType("scale", matches=lambda m: isinstance(m, Scale),
                         clipped_sum=lambda layer, a, g: summed(grad_sample(layer, [a], g)),
                         grad_sampler=grad_sample,
                         norm_sampler=lambda layer, a, g: norms(grad_sample(layer, a, g))))
'''

PROBE = '''
import torch
from stages.finetune.privacy.strategies import resolve
try:
    from stages.finetune.privacy.layers.scale import Scale
except ImportError:
    class Scale(torch.nn.Module):
        def __init__(self, d):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(d))
model = torch.nn.Sequential(torch.nn.Linear(4, 4), Scale(4))
strategy, why = resolve(model, "auto")
print(strategy.name, "|", why)
'''


@pytest.mark.slow  # two fresh interpreters importing torch and opacus (7 s of the fast tier's 130 CPU-seconds)
def test_a_new_layer_type_is_one_new_module(tmp_path):
    """In a copy of the tree, a model with an unknown layer falls back to hooks; adding one module to layers/ (no
    other file touched) makes auto pick book-keeping: opacus gets its samplers, ghost its norm, bk its clipped sum."""
    shutil.copytree(ROOT / "stages", tmp_path / "stages", ignore=shutil.ignore_patterns("__pycache__"))

    def auto() -> str:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE)], cwd=tmp_path, capture_output=True,
                              text=True, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout.strip()

    assert auto() == "hooks | ghost and bk have no norm sampler for 1 (Scale)"
    (tmp_path / "stages" / "finetune" / "privacy" / "layers" / "scale.py").write_text(SCALE)
    assert auto() == "bk | None"
