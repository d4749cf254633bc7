"""The app's own third-party requirements (Flask, Django...), installed at synth for the Lambda worker's platform.

``TaskCode.from_directories("myapp", requirements="requirements.txt")`` names them. At synth,
``install`` runs pip into a directory keyed on the file's bytes, the runtime's pins, the platform and
the Python version, so a re-synth reuses it; the worker function's asset holds what it installed, at
its root, beside ``worker_tier`` and the task directories. The container image installs the same file
(docker/worker.Dockerfile) in one pip run with the runtime's pins. No other function gets them.

pip runs with Lambda's platform (``--platform manylinux2014_<arch> --implementation cp
--python-version <runtime> --only-binary=:all:``): a package published only as a source
distribution cannot be installed for another platform and fails synth with pip's message.
It runs in the requirements file's directory, so a relative ``--find-links`` in the file
works; the runtime's pins (docker/requirements.txt) are its constraints, so everything it installs
works with the runtime's boto3 and Powertools.

The runtime ships boto3, botocore, s3transfer and aws-lambda-powertools (the Lambda runtime and the
Powertools layer, or the image's own pins). ``check`` refuses a requirement that pins one to another
version than the runtime's, since it could not be honoured; ``install`` drops their copies from the
asset so the runtime's are the ones imported.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from worker_tier.core.errors import ConfigurationError

# What the runtime ships itself, by canonical distribution name.
RUNTIME_DISTRIBUTIONS = frozenset({"boto3", "botocore", "s3transfer", "aws-lambda-powertools"})
# Shipped at the version the runtime's boto3 pin requires, which the app cannot choose.
FOLLOWING_BOTO3 = frozenset({"botocore", "s3transfer"})
# Lines the container image could not follow: it copies this one file, and installs nothing editable.
UNSUPPORTED_OPTIONS = ("-r", "--requirement", "-c", "--constraint", "-e", "--editable")
# pip's platform tag for each Lambda architecture (aws_lambda.Architecture.name).
PIP_PLATFORM_BY_ARCHITECTURE = {"arm64": "manylinux2014_aarch64", "x86_64": "manylinux2014_x86_64"}
PIP_IMPLEMENTATION = "cp"
# The last lines of pip's output that a failed install reports.
PIP_ERROR_LINES = 20
# ``name[extras] == version``, then the end, a marker or an option (``--hash``); a range is pip's to check.
_EXACT_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*===?\s*([^\s;,]+)(?=\s|;|$)")


class RequirementsError(ConfigurationError):
    """A requirements file that cannot be installed beside the runtime; the message names the line and the rule."""


def canonical_name(name: str) -> str:
    """PEP 503's normalized name: ``AWS_Lambda.Powertools`` -> ``aws-lambda-powertools``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_pins(runtime_requirements: Path) -> dict[str, str]:
    """``{canonical name: version}`` of the runtime's exact pins (docker/requirements.txt)."""
    pins = {}
    for line in _lines(runtime_requirements):
        match = _EXACT_PIN.match(line)
        if match:
            pins[canonical_name(match[1])] = match[2]
    return pins


def check(requirements: Path, runtime_requirements: Path) -> None:
    """RequirementsError unless the file exists and none of its lines fights the runtime.

    Examples
    --------
    >>> check(Path("requirements.txt"), DOCKER_DIR / "requirements.txt")  # doctest: +SKIP
    """
    if not requirements.is_file():
        raise RequirementsError(f"requirements file {str(requirements)!r} does not exist or is not a file")
    pins = runtime_pins(runtime_requirements)
    for number, line in enumerate(requirements.read_text().splitlines(), start=1):
        _check_line(f"{requirements}:{number}", line.split(" #")[0].strip(), pins)


def _check_line(where: str, line: str, pins: dict[str, str]) -> None:
    """RequirementsError for an option the image cannot follow, or a pin of what the runtime ships."""
    if line.split("=")[0].split(" ")[0] in UNSUPPORTED_OPTIONS:
        raise RequirementsError(f"{where}: {line!r} is not supported: the container image copies this one file and "
                                "installs nothing editable; list the requirements in it")
    pin = _EXACT_PIN.match(line)
    if pin is None:
        return
    name, version = canonical_name(pin[1]), pin[2]
    if name in FOLLOWING_BOTO3:
        raise RequirementsError(f"{where}: {line!r} pins {name}, which the runtime ships at the version its boto3 "
                                f"{pins.get('boto3')} requires; remove the pin")
    if name in pins and pins[name] != version:
        raise RequirementsError(f"{where}: {line!r} pins {name} {version}, but the runtime ships {name} {pins[name]} "
                                f"and imports its own; pin {name}=={pins[name]} or remove the pin")


def _lines(path: Path) -> list[str]:
    """The file's lines without comments or blanks."""
    return [line.split("#")[0].strip() for line in path.read_text().splitlines() if line.split("#")[0].strip()]


def lambda_target() -> tuple[str, str]:
    """(pip's platform tag, Python version) of the Lambda worker: its architecture and runtime."""
    from worker_tier_cdk.runtime import LAMBDA_ARCHITECTURE, PYTHON_VERSION  # here: imports aws_cdk

    return PIP_PLATFORM_BY_ARCHITECTURE[LAMBDA_ARCHITECTURE.name], PYTHON_VERSION


def install(requirements: Path, runtime_requirements: Path, cache: Path) -> Path:
    """The directory holding the requirements installed for Lambda: ``cache/requirements-<key>``, made once per key."""
    key = _key(requirements, runtime_requirements)
    target = cache / f"requirements-{key}"
    if target.is_dir():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=cache))
    try:
        _pip(requirements, runtime_requirements, partial)
        _drop_runtime_distributions(partial)
        partial.chmod(0o755)
        partial.rename(target)
    except OSError:
        if not target.is_dir():
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def _key(requirements: Path, runtime_requirements: Path) -> str:
    """SHA-256 of what decides the install: the file, the runtime's pins, the platform and the Python version."""
    digest = hashlib.sha256()
    for part in (requirements.read_bytes(), runtime_requirements.read_bytes(),
                 "\0".join((*lambda_target(), PIP_IMPLEMENTATION)).encode()):
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()


def _pip(requirements: Path, runtime_requirements: Path, target: Path) -> None:
    """pip install for Lambda's platform into ``target``; RequirementsError with pip's last lines when it fails."""
    platform, python_version = lambda_target()
    command = [
        sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--no-compile",
        "--target", str(target), "--platform", platform, "--implementation", PIP_IMPLEMENTATION,
        "--python-version", python_version, "--only-binary=:all:",
        "--requirement", str(requirements), "--constraint", str(runtime_requirements),
    ]
    result = subprocess.run(command, cwd=requirements.parent, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        output = "\n".join((result.stdout + result.stderr).strip().splitlines()[-PIP_ERROR_LINES:])
        raise RequirementsError(
            f"pip could not install {str(requirements)!r} for Lambda ({platform}, Python {python_version}, "
            f"wheels only):\n{output}")


def _drop_runtime_distributions(target: Path) -> None:
    """Remove what pip installed of RUNTIME_DISTRIBUTIONS (by their RECORD), so the runtime's copies are imported."""
    for dist_info in target.glob("*.dist-info"):
        if canonical_name(dist_info.name.split("-")[0]) not in RUNTIME_DISTRIBUTIONS:  # <name>-<version>.dist-info
            continue
        for line in (dist_info / "RECORD").read_text().splitlines():
            path = target / line.split(",")[0]
            if path.is_file() and path.resolve().is_relative_to(target.resolve()):
                path.unlink()
        shutil.rmtree(dist_info, ignore_errors=True)
    for directory in sorted((d for d in target.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True):
        if not any(directory.iterdir()):
            directory.rmdir()
