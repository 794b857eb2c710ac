"""The lock (requirements-lock.txt) agrees with pyproject.toml, the Makefile and environment.yml.

Regenerate both files with ``make lock`` when a test here fails after pyproject.toml changed.
"""

import re
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from tools import lock

ROOT = Path(__file__).resolve().parents[1]


def _makefile_variable(name):
    (value,) = re.findall(
        rf"^{name}\s*[:?]?=\s*(\S+)\s*$", (ROOT / "Makefile").read_text(), re.M
    )
    return value


@pytest.fixture(scope="module")
def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def pins():
    return lock.read_pins(lock.LOCK.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def torch_cpu():
    return _makefile_variable("TORCH_CPU")


def test_the_makefile_installs_the_lock_that_tools_lock_writes():
    assert _makefile_variable("LOCK") == lock.LOCK.name


def test_the_lock_satisfies_pyproject(pyproject, pins, torch_cpu):
    # the extras CI installs exist in pyproject (a renamed extra would drop out of the lock)
    assert set(lock.EXTRAS) <= set(pyproject["project"]["optional-dependencies"])
    assert len(pins) > 100  # the whole tree, not only the direct requirements
    assert lock.problems(pyproject, pins, torch_cpu) == []


def test_the_lock_pins_the_dependencies_of_the_cpu_torch(pyproject, pins, torch_cpu):
    installed = Version(metadata.version("torch"))
    if not Requirement(torch_cpu).specifier.contains(installed):
        pytest.skip(f"torch {installed} is installed, not the Makefile's {torch_cpu}")
    requirements = lock.installed_torch_requirements(torch_cpu)
    assert {r.name for r in requirements} >= {"filelock", "networkx", "sympy"}
    assert lock.problems(pyproject, pins, torch_cpu, requirements) == []


def test_the_check_finds_a_bound_above_the_lock_a_missing_pin_and_cuda(
    pyproject, pins, torch_cpu
):
    """The check itself can fail: a raised lower bound, a dropped pin, a CUDA package."""
    bumped = {**pyproject, "project": dict(pyproject["project"])}
    numpy = pins["numpy"]
    bumped["project"]["dependencies"] = [
        f"numpy>={numpy.major + 1}" if req.startswith("numpy") else req
        for req in pyproject["project"]["dependencies"]
    ]
    assert lock.problems(bumped, pins, torch_cpu) == [
        f"numpy>={numpy.major + 1} is locked at {numpy}"
    ]
    without_ruff = {name: v for name, v in pins.items() if name != "ruff"}
    assert "ruff>=0.6 is not in the lock" in lock.problems(
        pyproject, without_ruff, torch_cpu
    )
    cuda = {**pins, "nvidia-cublas-cu12": Version("12.8.4.1"), "triton": Version("3.5")}
    assert lock.problems(pyproject, cuda, torch_cpu) == [
        "nvidia-cublas-cu12 is a CUDA package",
        "triton is a CUDA package",
    ]
    assert lock.problems(pyproject, pins, "torch==2.0.1") == [
        "torch==2.0.1 does not satisfy pyproject's torch>=2.1"
    ]


def test_the_lock_holds_exact_pins_only():
    with pytest.raises(ValueError, match="not an exact pin"):
        lock.read_pins("numpy==2.4.6\nscipy>=1.10\n")
    assert lock.read_pins("# c\nPyYAML==6.0.3\n    # via x\n") == {
        "pyyaml": Version("6.0.3")
    }


def test_the_markers_are_those_of_linux_cpython_311():
    assert lock.applies(
        Requirement("a; python_version >= '3.11' and sys_platform == 'linux'")
    )
    assert not lock.applies(Requirement("a; python_version < '3.11'"))
    assert not lock.applies(Requirement("a; platform_machine == 'arm64'"))
    assert not lock.applies(Requirement("a; extra == 'docs'"))


def test_environment_yml_carries_the_lock(pins, torch_cpu):
    text = (ROOT / "environment.yml").read_text(encoding="utf-8")
    assert text == lock.environment_yml(pins, torch_cpu), "run make lock"
    # and read as conda reads it, independently of the generator
    conda = yaml.safe_load(text)
    *packages, pip = conda["dependencies"]
    assert {"python=3.11", "pip", "nodejs"} == set(packages)
    assert torch_cpu in pip["pip"] and "-e ." in pip["pip"]
    exact = [line for line in pip["pip"] if "==" in line and line != torch_cpu]
    assert lock.read_pins("\n".join(exact)) == pins
