"""TaskCode.from_directories: a task directory is deployed under its own name, so the name must import as itself."""

from __future__ import annotations

import pytest

from worker_tier_cdk.code import RUNTIME_IMPORT_NAMES, TaskCode, TaskCodeError

SHADOWING = ("must not be a standard-library module's name, which it would shadow")
DEPENDENCY = f"must not be a package the runtime imports ({', '.join(sorted(RUNTIME_IMPORT_NAMES))})"
NOT_IDENTIFIER = "must be a Python identifier (letters, digits and underscores, not first a digit, not a keyword)"


@pytest.mark.parametrize(
    "name, rule",
    [
        ("json", SHADOWING),
        ("logging", SHADOWING),
        ("boto3", DEPENDENCY),
        ("botocore", DEPENDENCY),
        ("aws_lambda_powertools", DEPENDENCY),
        ("dateutil", DEPENDENCY),
        ("typing_extensions", DEPENDENCY),
        ("worker_tier", "must not start with 'worker_tier', the runtime's own name"),
        ("worker_tier_cdk", "must not start with 'worker_tier', the runtime's own name"),
        ("my-tasks", NOT_IDENTIFIER),
        ("2tasks", NOT_IDENTIFIER),
        ("class", NOT_IDENTIFIER),
    ],
)
def test_a_directory_whose_name_would_not_import_as_itself_is_refused(tmp_path, name, rule):
    # GIVEN a task directory named like a module the runtime imports, or not importable at all
    (tmp_path / name).mkdir()
    # WHEN it is named as task code  THEN a TaskCodeError names the directory and the rule
    with pytest.raises(TaskCodeError) as error:
        TaskCode.from_directories(tmp_path / name)
    assert str(error.value) == (f"task code directory {str(tmp_path / name)!r} is deployed as the package {name!r}, "
                                f"so its name {rule}; rename the directory")


def test_a_symlinked_directory_keeps_its_links_name(tmp_path):
    # GIVEN a link 'linked' to a directory 'realdir'
    (tmp_path / "realdir").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "realdir")
    # WHEN it is named as task code  THEN it deploys as 'linked', the name task_modules uses
    assert TaskCode.from_directories(tmp_path / "linked").directories == (tmp_path / "linked",)


def test_a_relative_directory_is_made_absolute(tmp_path, monkeypatch):
    # GIVEN ./tasks in the current directory  WHEN named relatively  THEN it is kept as an absolute path
    (tmp_path / "tasks").mkdir()
    monkeypatch.chdir(tmp_path)
    assert TaskCode.from_directories("tasks").directories == (tmp_path / "tasks",)
