"""The mypy ratchet in pyproject.toml, now empty: no module of devplan is exempted from --strict's
checks or checked leniently again, and the settings every module is held to stay on."""

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
MYPY = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
STRICT = (
    "disallow_untyped_defs",
    "disallow_incomplete_defs",
    "disallow_untyped_calls",
    "disallow_untyped_decorators",
    "disallow_any_generics",
    "disallow_subclassing_any",
    "warn_return_any",
    "no_implicit_reexport",
)

# The modules each ratchet still exempts (issue 56 began them with 18 not strict): both lists are
# empty, every module is held to --strict's checks, strict_optional and check_untyped_defs, and
# nothing may join either list.
LENIENT: set[str] = set()
NOT_STRICT: set[str] = set()


def _listed(relaxes) -> list[str]:
    """devplan's modules in the overrides that `relaxes` picks (torch's are not devplan's to type)."""
    return [
        module
        for override in MYPY.get("overrides", [])
        if relaxes(override)
        for module in override["module"]
        if module.startswith("devplan.")
    ]


def _lenient(override: dict) -> bool:
    return override.get("strict_optional") is False or bool(override.get("disable_error_code"))


def _not_strict(override: dict) -> bool:
    return any(override.get(flag) is False for flag in STRICT)


def test_relaxed_modules_only_shrink():
    for listed, allowed in ((_listed(_lenient), LENIENT), (_listed(_not_strict), NOT_STRICT)):
        grown = sorted(set(listed) - allowed)
        assert not grown, f"modules added to a mypy ratchet in pyproject.toml: {grown}; type them instead"


def test_relaxed_modules_exist_and_are_listed_once():
    for listed in (_listed(_lenient), _listed(_not_strict)):
        assert len(listed) == len(set(listed))
        for module in listed:
            path = ROOT / (module.replace(".", "/") + ".py")
            package = ROOT / module.replace(".", "/") / "__init__.py"
            assert path.is_file() or package.is_file(), f"{module} is in a mypy ratchet but not in devplan/"


def test_global_settings_stay_on():
    assert MYPY["check_untyped_defs"] is True
    assert MYPY.get("strict_optional", True) is True
    assert not MYPY.get("disable_error_code")
    assert all(MYPY[flag] is True for flag in STRICT)
