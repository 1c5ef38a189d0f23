"""Each convention row on real tool output (tests/fixtures/error_conventions, sources in NOTICE.md).

Each test asserts the line a developer would quote, with the location or project frame its row
keeps, and that the noise around it (`--- FAIL: TestX`, `FAIL\tpkg\t0.01s`, `exit status 1`,
`error: aborting due to …`) does not come first or at all.
"""

from __future__ import annotations

from pathlib import Path

from worker.facts.output import CONVENTIONS, error_findings, error_lines, is_project_path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "error_conventions"


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_every_row_cites_its_convention():
    assert len({c.name for c in CONVENTIONS}) == len(CONVENTIONS)
    assert all(len(c.source) > 20 for c in CONVENTIONS)


def test_go_test_messages_come_before_the_verdict_and_passing_logs_are_not_errors():
    # go-junit-report testdata/001-pass-fail-skip.txt: `go test -v` of passing, failing, skipped tests.
    assert error_findings(read("go_test.txt")) == [
        ("fail_test.go:6: Error message", None),
        ("fail_test.go:7: Longer", None),
        ("--- FAIL: TestOne (0.151s)", None),
    ]


def test_go_panic_keeps_the_first_project_frame():
    # go-junit-report testdata/105-panic.gojson.txt (the `Output` of each event): a panic in init.
    assert error_findings(read("go_panic.txt")) == [("panic: init", "/src/package/name/panic/main_test.go:6 +0x27")]
    # 108-paniclate: TestMain panics; `_testmain.go` (go test's generated main) is not the project.
    assert error_findings(read("go_panic_late.txt")) == [("panic: panic", "/src/package/name/paniclate/main_test.go:9")]


def test_rustc_error_keeps_its_location_not_the_abort_summary():
    # rust-lang/rust tests/ui/borrowck/borrowck-move-out-of-vec-tail.stderr
    assert error_findings(read("rustc_e0508.stderr")) == [
        ("error[E0508]: cannot move out of type `[Foo]`, a non-copy slice",
         "--> $DIR/borrowck-move-out-of-vec-tail.rs:17:19")]


def test_pytest_assertion_keeps_its_crash_location_and_the_summary_lines():
    # pytest doc/en/how-to/output.rst, `pytest -ra` example.
    assert error_findings(read("pytest_ra.txt")) == [
        ("E       assert 0", "test_example.py:6: AssertionError"),
        ("ERROR test_example.py::test_error - assert 0", None),
        ("FAILED test_example.py::test_fail - assert 0", None),
    ]
    assert not any(line.startswith(("SKIPPED", "XFAIL", "XPASS")) for line in error_lines(read("pytest_ra.txt")))


def test_project_paths_exclude_installed_packages_and_toolchains():
    assert not is_project_path("/usr/local/go/src/os/exec/exec.go")
    assert not is_project_path("/home/mafredri/sdk/go1.20rc1/src/testing/testing.go")
    assert not is_project_path("/root/go/pkg/mod/github.com/stretchr/testify@v1.8.4/assert/assertions.go")
    assert not is_project_path("/usr/lib/python3.11/json/decoder.py")
    assert not is_project_path("/repo/.venv/lib/python3.11/site-packages/yaml/__init__.py")
    assert not is_project_path("/app/node_modules/jest-circus/build/utils.js")
    assert not is_project_path("/rustc/9d1b2106e23b1bdd4d0a49d1ee6e7bc4d3d3a8f1/library/core/src/panicking.rs")
    assert is_project_path("/Users/me/go/src/github.com/bcicen/grmon/parse.go")  # GOPATH: a dotted path is not std
    assert is_project_path("/src/package/name/panic/main_test.go")
    assert is_project_path("scripts/load_config.py")


def test_the_location_travels_with_the_error_into_the_checkpoint():
    from tests.fakes import SessionBuilder
    from worker.facts.ledger import extract_ledger
    from worker.pipeline.checkpoint import ledger_sections

    b = SessionBuilder()
    b.user("fix the build")
    b.bash("cargo build", read("rustc_e0508.stderr") + "\nExit code 101", is_error=True)
    ledger = extract_ledger(b.messages)
    err = ledger.unresolved_errors()[0]
    assert (err.text, err.at) == ("error[E0508]: cannot move out of type `[Foo]`, a non-copy slice",
                                  "--> $DIR/borrowck-move-out-of-vec-tail.rs:17:19")
    rendered = "\n".join(line for s in ledger_sections(ledger).values() for blk in s.blocks
                         for bullet in blk.bullets for line in bullet.lines())
    assert "`--> $DIR/borrowck-move-out-of-vec-tail.rs:17:19`" in rendered
