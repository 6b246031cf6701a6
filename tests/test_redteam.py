"""The red team: every attack in tests/redteam/ is graded officially, in the sandbox, and must fail.

Convention for an attack entry (the harness finds them; nothing else needs registering):
  tests/redteam/<name>.py, tests/redteam/<name>.ipynb, a folder tests/redteam/<name>/ of
  notebooks (graded as one submission), or a folder holding `submission.py` and the files beside
  it (graded as that .py, with its neighbours). Its first lines — `#` comments of the .py, the
  first markdown cell of the notebook (of the folder's first notebook, in name order) — say
      # attack: <class> - <what it tries>
      # functions: <comma-separated graded functions to grade, or all>
      # honest: <points the honest version of those functions earns; default 0>
      # says: <words the grader's output must contain>        (optional)
  Names starting with "_" are helpers, not attacks.

Each attack is graded with `official=True` (no sandbox, no test: the module is skipped) in each
isolation tier that holds here, forced with `isolation=` (bubblewrap; Landlock and seccomp), each
tier graded once for all the tests, on one template per grading at a time (tests/shared_template.py
says why that tries what a template of its own would), and the tests assert, with the same
assertions in both, that
  - it earns no more than `honest` points;
  - the grader's output names what happened (`says`), when the entry asks for it;
  - nothing persists: after every attack has been graded, a blank submission scores 0 and the
    reference scores full marks in real later gradings, and no file of a sandbox user is left in
    the host's /tmp or /dev/shm;
  - no process outlives the grading: after the gradings, /proc shows no process of a user id
    those gradings' sandboxes ran children under, nor one in their memory cgroups (where there
    are none: no worker of this checkout); other gradings may be running on this machine
    meanwhile, and theirs are not counted.
Some attacks need something from the host to prove a hole (a loopback server that hands out the
reference's source, for the network attacks): `_host_services` starts those before grading.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import socketserver
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from shared_template import SharedTemplates

from autograder.api import grade
from autograder.trusted import sandbox
from autograder.trusted.grader import ROOT
from autograder.trusted.isolation import sandbox_problem

pytestmark = pytest.mark.slow

REDTEAM = Path(__file__).with_name("redteam")
TIERS = ("bubblewrap", "landlock")  # `isolation=`: each tier the red team is graded in
REFERENCE_PORT = 47613  # the network attack asks the host for the reference here
REFERENCE_SOCKET = "/tmp/grpo-redteam-reference.sock"  # and here, by a unix socket's path
GRADING = {"probe_timeout": 4.0, "memory_mb": 3072, "time_limit": 240.0}


def submitted(entry: Path) -> Path:
    """What is graded for an entry: a folder's `submission.py` where it has one, else the entry."""
    return entry / "submission.py" if (entry / "submission.py").is_file() else entry


def read_header(entry: Path) -> dict:
    """The `# key: value` lines at the top of an attack entry."""
    entry = submitted(entry)
    if entry.is_dir():
        entry = sorted(entry.glob("*.ipynb"))[0]
    if entry.suffix == ".ipynb":
        cells = json.loads(entry.read_bytes().decode("utf-8", "replace"))["cells"]
        source = next(c["source"] for c in cells if c["cell_type"] == "markdown")
        text = "".join(source) if isinstance(source, list) else source
    else:
        text = entry.read_text(encoding="utf-8", errors="replace")
    header = {}
    for line in text.splitlines()[:12]:
        match = re.match(r"#\s*(attack|functions|honest|says):\s*(.*)", line)
        if match:
            header[match.group(1)] = match.group(2).strip()
    assert "attack" in header and "functions" in header, f"{entry}: no attack/functions header"
    functions = header["functions"]
    return {"attack": header["attack"], "says": header.get("says"),
            "functions": None if functions == "all" else tuple(f.strip() for f in functions.split(",")),
            "honest": float(header.get("honest", 0))}


ENTRIES = sorted(p for p in REDTEAM.iterdir()
                 if not p.name.startswith(("_", ".")) and (p.is_dir() or p.suffix in (".py", ".ipynb")))


TRAIN_STEP_TCP_PORTS = (47614, 8614)  # the data-parallel rank attack: in the kernel's ephemeral range, below it
TRAIN_STEP_UDP_PORT = 47615


def _serving(module: str, udp: bool = False) -> type:
    """A handler that hands out course/`module` (to a TCP connection, or in answer to a datagram)."""
    source = (ROOT / "course" / module).read_bytes()

    class Handler(socketserver.BaseRequestHandler):
        def handle(self):
            if udp:
                self.request[1].sendto(source, self.client_address)
            else:
                self.request.sendall(source)
    return Handler


class _SharedPort:
    """A server whose port another may serve at once (SO_REUSEPORT): the two tiers' gradings may
    run together on two pytest-xdist workers, each with its own servers; SO_REUSEADDR, because a
    port of the previous session may still be in TIME_WAIT."""

    def server_bind(self):
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()


class _TCPServer(_SharedPort, socketserver.TCPServer):
    pass


class _UDPServer(_SharedPort, socketserver.UDPServer):
    pass


class _UnixServer(socketserver.UnixStreamServer):
    """A root-owned unix socket outside every sandbox, writable by all (mode 0666: only the
    sandbox stands between a stage child and it); the two tiers' gradings on two pytest-xdist
    workers share the first one made."""

    def server_bind(self):
        super().server_bind()
        os.chmod(self.server_address, 0o666)

    def server_close(self):
        super().server_close()
        with contextlib.suppress(OSError):
            os.unlink(self.server_address)


def _unix_service() -> list:
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as probe:
        probe.connect(REFERENCE_SOCKET)
        return []  # another worker's, alive
    with contextlib.suppress(OSError):
        os.unlink(REFERENCE_SOCKET)
    return [_UnixServer(REFERENCE_SOCKET, _serving("scoring.py"))]


def _host_services() -> list:
    servers = [_TCPServer(("127.0.0.1", REFERENCE_PORT), _serving("scoring.py"))]
    servers += _unix_service()
    servers += [_TCPServer(("127.0.0.1", port), _serving("train_step.py"))
                for port in TRAIN_STEP_TCP_PORTS]
    servers.append(_UDPServer(("127.0.0.1", TRAIN_STEP_UDP_PORT),
                                          _serving("train_step.py", udp=True)))
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    return servers


@dataclass
class Ours:
    """What tells our gradings' processes from those of other gradings on this machine (another
    test's, on another pytest-xdist worker, too): the user ids their children ran under, the memory
    cgroups their templates started in, and the grader processes (a CLI run) whose templates'
    cgroups are named after them (`autograder-<pid>-...`). Where the machine gives the grader no
    cgroup, every worker of this checkout counts as ours."""
    uids: set = field(default_factory=set)
    cgroups: set = field(default_factory=set)
    graders: set = field(default_factory=set)

    def owns(self, uid: int, groups: set, command: str, worker: str) -> bool:
        if uid in self.uids or groups & self.cgroups:
            return True
        if any(g.startswith(f"autograder-{pid}-") for g in groups for pid in self.graders):
            return True
        return not self.cgroups and not (self.graders and _cgroups_here()) and worker in command


def _cgroups_here() -> bool:
    """Whether a grader on this machine puts its template in a memory cgroup (as `memory.create`)."""
    from autograder.trusted import memory
    return (memory.V1 / "memory.limit_in_bytes").exists() or memory._v2_parent() is not None


def _leftovers(ours: Ours) -> list[str]:
    """Our gradings' processes still alive; their users' files in /tmp, /dev/shm."""
    worker = str(ROOT / "autograder" / "untrusted" / "worker.py")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            uid = int(re.search(r"Uid:\s+(\d+)", status).group(1))
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            groups = {line.rsplit("/", 1)[-1] for line in (entry / "cgroup").read_text().splitlines()}
        except (OSError, AttributeError):
            continue
        if ours.owns(uid, groups, command, worker):
            found.append(f"process {entry.name} (uid {uid}): {command[:120]}")
    for folder in (Path("/tmp"), Path("/dev/shm")):
        for path in folder.iterdir() if folder.is_dir() else ():
            try:
                if path.lstat().st_uid in ours.uids:
                    found.append(f"file {path} of a sandbox user")
            except OSError:
                continue
    return found


@contextlib.contextmanager
def our_gradings():
    """`Ours` of every sandbox started meanwhile in this process (filled as they start): only
    this test's gradings, whatever else runs on the machine."""
    ours, real_init, real_start = Ours(), sandbox.Sandbox.__init__, sandbox.Sandbox.start

    def recording_init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        ours.uids.update(self.uids())

    def recording_start(self, *args, **kwargs):
        try:
            return real_start(self, *args, **kwargs)
        finally:
            if self.cgroup is not None:
                ours.cgroups.add(self.cgroup.name)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sandbox.Sandbox, "__init__", recording_init)
        patch.setattr(sandbox.Sandbox, "start", recording_start)
        yield ours


@pytest.fixture(scope="class")
def red_team(request) -> dict:
    """Every attack graded in the class's tier (a class each: pytest-xdist's loadscope may then
    grade the two tiers on two workers at once)."""
    tier = request.cls.tier
    problem = sandbox_problem(ROOT, tier)
    if problem:
        pytest.skip(f"no {tier} sandbox here: {problem}")
    servers = _host_services()
    try:
        started = time.monotonic()
        with our_gradings() as ours:
            # one template per grading at a time (tests/shared_template.py), ended before the
            # leftovers are looked for; the later gradings below start their own, as the product does
            with SharedTemplates(GRADING["memory_mb"], tier) as templates:
                # the stage-apart attacks relay the reference with exec, which the copy rule
                # alone zeroes: they are graded with copies allowed, so that what stops them is
                # isolation; the others under --copies zero, where a pasted copy earns nothing
                graded = templates.grade_all({entry.name: (
                    (str(submitted(entry)), read_header(entry)["functions"]),
                    {"official": True, "allow_reference": entry.name.startswith("stages_"),
                     "copies": "zero", **GRADING})
                    for entry in ENTRIES})
        elapsed = time.monotonic() - started
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
    time.sleep(1.0)  # a daemon that escaped would still be there, or would write by now
    leftovers = _leftovers(ours)
    # real later gradings: blank work scores 0, the reference full marks
    later_blank = grade(str(REDTEAM / "_blank.py"), ("compute_entropy",), official=True,
                        isolation=tier)
    later_reference = grade("course", ("compute_entropy", "tokenize_prompt_and_output"),
                            official=True, isolation=tier)
    return {"graded": graded, "leftovers": leftovers, "blank": later_blank,
            "reference": later_reference, "seconds": elapsed}


def test_the_red_team_is_large_and_covers_every_class():
    classes = {read_header(e)["attack"].split(" - ")[0].strip() for e in ENTRIES}
    assert len(ENTRIES) >= 30, f"only {len(ENTRIES)} attacks"
    for needed in ("persistence", "escape", "signal", "disk", "processes", "memory", "network",
                   "snooping", "delegation", "classification", "stages"):
        assert needed in classes, f"no attack of class {needed!r}: {sorted(classes)}"


class RedTeam:
    """The tests of one tier's gradings (`tier`: an `isolation=` value of TIERS)."""

    tier = ""

    @pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
    def test_attack_earns_nothing_beyond_honest_work(self, entry, red_team):
        header = read_header(entry)
        graded = red_team["graded"][entry.name]
        outputs = " | ".join(f"{n}: {r['output'][:300]}" for n, r in graded["results"].items()
                             if r["score"])
        assert graded["max_score"] > 0, f"{entry.name}: nothing was graded"
        assert graded["score"] <= header["honest"], f"{entry.name} earned {graded['score']}: {outputs}"
        assert not graded["practice"], graded["isolation"]
        assert graded["isolation_tier"] == {"landlock": "landlock-seccomp"}.get(self.tier, self.tier)
        if header["says"]:
            everything = " ".join(r["output"] for r in graded["results"].values())
            everything += " ".join(graded["load_errors"]) + (graded["load_failure"] or "")
            assert header["says"] in everything, \
                f"{entry.name}: {header['says']!r} not in {everything[:2000]}"

    def test_no_reference_text_reaches_the_feedback(self, red_team):
        """The course finder keeps code, not text: an error message a submission raises (which
        the check's feedback shows the student) cannot carry an earlier stage's reference."""
        graded = red_team["graded"]["refuse_reference_text_in_feedback.py"]
        everything = " ".join(r["output"] for r in graded["results"].values())
        assert graded["results"] and "def compute_group_normalized_rewards" not in everything, \
            everything[:1000]

    def test_nothing_outlives_the_gradings(self, red_team):
        assert not red_team["leftovers"], red_team["leftovers"]

    def test_later_gradings_are_not_affected(self, red_team):
        blank, reference = red_team["blank"], red_team["reference"]
        assert blank["max_score"] > 0 and blank["score"] == 0, blank["results"]
        failed = {n: r["output"] for n, r in reference["results"].items() if r["status"] == "failed"}
        assert reference["score"] == reference["max_score"] > 0, failed


class TestBubblewrap(RedTeam):
    tier = "bubblewrap"


class TestLandlock(RedTeam):
    tier = "landlock"


@pytest.mark.parametrize("tier", TIERS)
def test_a_daemon_cannot_rewrite_results_json_after_the_grader_exits(tmp_path, tier):
    """The CLI, officially: the attack's daemon waits for the grader to finish, then writes a
    perfect results.json wherever it can guess; the file stays as the grader wrote it."""
    if sandbox_problem(ROOT, tier):
        pytest.skip(f"no {tier} sandbox here: {sandbox_problem(ROOT, tier)}")
    results = tmp_path / "results.json"
    cli = subprocess.Popen([sys.executable, "-m", "pytest", "autograder", "--official",
                            "--isolation", tier, "--submission",
                            str(REDTEAM / "escape_outlive_results.py"), "--results", str(results),
                            "-k", "compute_entropy", "-q", "-p", "no:cacheprovider"],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = cli.communicate(timeout=300)
    finally:
        cli.kill()
    assert cli.returncode == 1, output[-3000:]
    written = results.read_text()
    time.sleep(3.0)  # the daemon writes every 0.25 s for 15 s, if it is still alive
    assert results.read_text() == written and json.loads(written)["score"] == 0
    assert not _leftovers(Ours(graders={cli.pid}))  # the CLI's own sandbox, by its cgroup's name


@pytest.mark.parametrize("name", ("stages_tmp_files.py", "stages_abstract_socket.py"))
def test_the_stage_attacks_earn_points_where_stages_live_at_once(name, monkeypatch):
    """The stage-apart attacks are real: with every stage's child kept alive (the grader's ending
    of the previous stage's child switched off) and the checks run latest stage first (course
    order alone would start the later stage's child too late to relay), the earlier stage takes
    the reference a later stage's child relayed, and earns its points."""
    from autograder import api
    if sandbox_problem(ROOT, "bubblewrap"):
        pytest.skip(f"no bubblewrap sandbox here: {sandbox_problem(ROOT, 'bubblewrap')}")
    from autograder.trusted import grader

    real = grader.Grader._stage_client

    def all_alive(self, stage):
        if stage in self.stages:
            return self.stages[stage]
        others = dict(self.stages)
        self.stages.clear()  # nothing for it to end
        try:
            return real(self, stage)
        finally:
            self.stages.update(others)

    monkeypatch.setattr(grader.Grader, "_stage_client", all_alive)
    monkeypatch.setattr(api, "CHECKS", list(reversed(api.CHECKS)))
    entry = REDTEAM / name
    graded = grade(str(entry), read_header(entry)["functions"], official=True,
                   isolation="bubblewrap", allow_reference=True, **GRADING)
    assert graded["score"] > read_header(entry)["honest"], graded["results"]


# Gradescope's own entry (what run_autograder calls) on this host's layout, all at once: code
# made from text, reference text in the feedback, frames. Every attack is graded in both tiers by
# `red_team`; what this entry adds (results.json, the layout) is the same in each, so the frames
# attack, whose holes differ between the tiers (seccomp, signal handlers), is graded in both and
# the others in one each: 4 gradings, about 40 CPU-seconds.
GRADESCOPE_ATTACKS = (("refuse_finder_globals.py", "bubblewrap"),
                      ("refuse_reference_text_in_feedback.py", "landlock"),
                      ("refuse_frames.py", "bubblewrap"), ("refuse_frames.py", "landlock"))


def _reference_lines() -> set[str]:
    """The course reference's lines of 30 characters or more that the grader's own text does not
    hold (a check may quote a docstring's phrase; it never quotes code)."""
    grader = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "autograder").rglob("*.py"))
    return {line.strip() for path in (ROOT / "course").rglob("*.py")
            for line in path.read_text(encoding="utf-8").splitlines()
            if len(line.strip()) >= 30 and line.strip() not in grader}


def _graders_of(runs: dict) -> set[int]:
    """The grader processes (`pytest autograder`) the `gradescope run` processes start, watched
    until every run ends: their pids name their sandboxes' cgroups."""
    graders = set()
    while any(process.poll() is None for process in runs.values()):
        for process in runs.values():
            with contextlib.suppress(OSError):
                graders.update(int(pid) for pid in Path(
                    f"/proc/{process.pid}/task/{process.pid}/children").read_text().split())
        time.sleep(0.1)
    return graders


def test_gradescopes_official_run_of_attacks_in_both_tiers(tmp_path):
    """`python -m autograder.gradescope run` on Gradescope's layout (submission/, results/), each
    attack of GRADESCOPE_ATTACKS in its tier: its results.json gives no points beyond the honest
    ones, no line of the reference in any test's name or feedback nor in the output, and the
    grading leaves no process and nothing in the layout but results.json beside the upload."""
    runs, graders = {}, set()
    for name, tier in GRADESCOPE_ATTACKS:
        if sandbox_problem(ROOT, tier):
            continue
        root = tmp_path / f"{tier}-{name}"
        (root / "submission").mkdir(parents=True)
        (root / "submission" / name).write_bytes((REDTEAM / name).read_bytes())
        # one at a time, bounded, its output to a file (a pipe nobody reads while it runs can
        # fill and stall it): four at once beside the suite's other gradings once took the
        # whole default --time-limit (1,231 s in CI against 27 s alone)
        log = tmp_path / f"{tier}-{name}.log"
        with log.open("w") as out:
            runs[root] = (log, subprocess.Popen(
                [sys.executable, "-m", "autograder.gradescope", "run", "--root", str(root),
                 "--isolation", tier, "--time-limit", "300"], cwd=ROOT, stdout=out,
                stderr=subprocess.STDOUT))
            graders |= _graders_of({root: runs[root][1]})
    if not runs:
        pytest.skip(f"no sandbox here: {sandbox_problem(ROOT, TIERS[0])}")
    reference = _reference_lines()
    for root, (log, process) in runs.items():
        output = log.read_text(errors="replace")
        name = root.name.split("-", 1)[1]
        assert process.returncode == 0, output[-3000:]
        document = json.loads((root / "results" / "results.json").read_text())
        assert 0 < sum(t["max_score"] for t in document["tests"])
        assert document["score"] <= read_header(REDTEAM / name)["honest"], document["tests"]
        shown = [document["output"]] + [t["name"] + t["output"] for t in document["tests"]]
        leaked = {line for line in reference for text in shown if line in text}
        assert not leaked, (name, sorted(leaked)[:5])
        left = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if not p.is_dir())
        assert left == ["results/results.json", f"submission/{name}"], left
    assert not _leftovers(Ours(graders=graders))


@contextlib.contextmanager
def message_queues():
    """The names of the machine's POSIX message queues, read from a mount of its mqueue
    filesystem of our own (/dev/mqueue need not be mounted): a callable, valid inside the block;
    the queues made meanwhile are deleted after it."""
    import tempfile

    folder = tempfile.mkdtemp(prefix="mqueue-")
    mounted = subprocess.run(["mount", "-t", "mqueue", "none", folder], capture_output=True)
    before = set(os.listdir(folder)) if not mounted.returncode else set()
    try:
        if mounted.returncode:
            pytest.skip(f"cannot list message queues here: {mounted.stderr.decode()[:200]}")
        yield lambda: sorted(os.listdir(folder))
    finally:
        for name in set(os.listdir(folder)) - before if not mounted.returncode else ():
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))
        subprocess.run(["umount", folder], capture_output=True)
        os.rmdir(folder)


@pytest.mark.parametrize("tier", TIERS)
def test_message_queues_carry_nothing_between_stages_and_none_is_left(tier, monkeypatch):
    """The queue attack with the checks run latest stage first, so that a later stage's child
    runs before an earlier one (tier 2: a queue is the machine's and outlives its maker, and
    Landlock refuses opening it, not making it, so its existence carries bits; tier 1: the stages
    of a grading share bubblewrap's IPC namespace, so its messages carry the reference): seccomp
    refuses mq_open, so no bit arrives, it earns nothing and no queue is left."""
    from autograder import api

    if sandbox_problem(ROOT, tier):
        pytest.skip(f"no {tier} sandbox here: {sandbox_problem(ROOT, tier)}")
    monkeypatch.setattr(api, "CHECKS", list(reversed(api.CHECKS)))
    entry = REDTEAM / "stages_message_queues.py"
    with message_queues() as listing:
        before = listing()
        graded = grade(str(entry), read_header(entry)["functions"], official=True,
                       isolation=tier, allow_reference=True, **GRADING)
        assert listing() == before
    said = " ".join(r["output"] for r in graded["results"].values())
    assert "message queues carried" not in said, said
    assert graded["max_score"] > 0 and graded["score"] == 0, graded["results"]
    assert not graded["incomplete"], graded["incomplete"]
