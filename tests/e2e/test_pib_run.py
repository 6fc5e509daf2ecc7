"""./pib run, as a CI job uses it: a fabric of its own (beside the pass's,
in a run directory of its own), a host directory shared with every
guest, a program built on the host run from it, the command's exit
status passed on, and a guest kernel warning failing a run whose
command passed. Each run restores its fabric from the snapshot that its
first run saved."""

import os
import re
import shlex
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest
import yaml

from pibctl import cli, container, paths, traffic_build

from transfers import TRAFFIC_LINE

PORT = 18990
# vm1 runs `make check` in the share: it waits for vm2's pib-traffic
# server (started by --also) to listen, moves random data to it over RC,
# and checks the data the host wrote into the share.
MAKEFILE = f"""\
check: vm1.traffic
\tsha256sum -c host.sha256
\techo written-by-vm1 > from-vm1

vm1.traffic:
\tfor i in $$(seq 300); do ssh vm2 ss -ltnH 'sport = :{PORT}' | grep -q . && break; \\
\t    sleep 0.2; done
\t./pib-traffic -p {PORT} -t send,write,read -s 1,4097,1M+3 vm2 > $@
"""
SERVER = f"./pib-traffic -p {PORT} > vm2.traffic"


def _pib_run(tmp_path, *args, timeout=900, launcher=None):
    """./pib run in a run directory of its own (or as `launcher`, the
    container's entry point, runs it); returns (status, output)."""
    env = dict(os.environ, PIB_RUN_DIR=str(tmp_path / "run"))
    launcher = launcher or [str(paths.REPO / "pib")]
    done = subprocess.run([*launcher, "run", "--logs", str(tmp_path / "logs"), *args],
                          capture_output=True, text=True, errors="replace", timeout=timeout,
                          env=env)
    output = done.stdout + done.stderr
    print(output[-3000:])
    return done.returncode, output


def _project(tmp_path):
    """A project's tree: a Makefile, a program built on the host against
    the image's libraries (pib-traffic), and random data from the host."""
    tree = tmp_path / "project"
    tree.mkdir()
    (tree / "Makefile").write_text(MAKEFILE)
    shutil.copy2(traffic_build.binary(), tree / "pib-traffic")
    data = os.urandom(3 << 20)
    (tree / "data.bin").write_bytes(data)
    digest = subprocess.run(["sha256sum", "data.bin"], cwd=tree, capture_output=True,
                            text=True, check=True).stdout
    (tree / "host.sha256").write_text(digest)
    return tree


def _traffic(path):
    return {m["test"]: m.groupdict() for m in re.finditer(TRAFFIC_LINE, path.read_text(), re.M)}


def _check_make_run(tmp_path, extra=(), launcher=None):
    tree = _project(tmp_path)
    status, output = _pib_run(tmp_path, "--share", str(tree), "--also", "vm2", SERVER, *extra,
                              "--", "make", "-C", str(tree), "check", launcher=launcher)
    assert status == 0, output
    assert "data.bin: OK" in output, output
    assert (tree / "from-vm1").read_text() == "written-by-vm1\n"
    sent, got = _traffic(tree / "vm1.traffic"), _traffic(tree / "vm2.traffic")
    assert set(sent) == {"send", "write", "read"} and sent.keys() == got.keys(), (sent, got)
    for name, line in sent.items():
        for field in ("messages", "bytes", "lost", "errors", "sha"):
            assert line[field] == got[name][field], f"{name}: {field} differs: {sent} {got}"
        assert line["errors"] == "0" and line["lost"] == "0" and int(line["bytes"]) > 0, sent
    logs = tmp_path / "logs"
    for name in ("vm1.dmesg", "vm2.dmesg", "vm1.console.log", "vm1.qemu.log", "switch1.log",
                 "vm1.out", "vm2.out"):
        assert (logs / name).is_file(), f"{name} not kept: {sorted(os.listdir(logs))}"
    return output


def test_pib_run_make_check_in_a_shared_tree_moves_data_between_guests(tmp_path):
    _check_make_run(tmp_path)


def test_pib_run_in_the_container_image_under_podman(tmp_path):
    """./pib container's image, run as a CI host would run it, with the
    host's snapshots mounted in: it restores the fabric the runs above
    saved, in a cache of its own."""
    built = subprocess.run([str(paths.REPO / "pib"), "container"], capture_output=True,
                           text=True, errors="replace", timeout=1200)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr
    tag = built.stdout.split()[-1]
    assert tag.startswith(container.NAME + ":"), built.stdout[-500:]
    launcher = ["podman", "run", "--rm", *container.podman_run_options(),
                "-v", f"{tmp_path}:{tmp_path}",
                "-v", f"{paths.cache_dir() / 'snapshots'}:{container.CACHE}/snapshots", tag]
    output = _check_make_run(tmp_path, launcher=launcher)
    assert f"in {container.CACHE}/run" in output and "restoring the fabric from its snapshot" \
        in output, output


def test_pib_run_make_check_on_connectx_guests(tmp_path):
    _check_make_run(tmp_path, ("--mlx5", "vm1,vm2"))
    for vm in ("vm1", "vm2"):
        assert "mlx5_core" in (tmp_path / "logs" / f"{vm}.dmesg").read_text()


def test_pib_run_stops_a_command_beside_that_outlives_the_main_one(tmp_path):
    status, output = _pib_run(tmp_path, "--grace", "2", "--also", "vm2", "echo serving; sleep 600",
                              "--", "true")
    assert status == 143, output
    assert "vm2| serving" in output and "still runs 2 s after the main command ended" in output
    assert "pib run: vm2 (sh -c 'echo serving; sleep 600') killed by signal 15" in output, output


def test_pib_run_passes_on_the_command_status_and_writes_junit(tmp_path):
    junit = tmp_path / "run.xml"
    status, output = _pib_run(tmp_path, "--junit", str(junit), "--", "sh", "-c",
                              "echo about to fail; exit 7")
    assert status == 7, output
    assert "about to fail" in output
    suite = ET.parse(junit).getroot()
    assert suite.get("tests") == "2" and suite.get("failures") == "1", ET.tostring(suite)
    failure = suite.find("testcase/failure")
    assert failure.get("message") == "exit status 7" and "about to fail" in failure.text


@pytest.mark.parametrize("ignore", [False, True], ids=["fails", "ignore-logs"])
def test_pib_run_fails_a_passing_command_when_a_guest_kernel_warns(tmp_path, ignore):
    warning = "WARNING: CPU: 0 PID: 1 at drivers/pib-run-test.c:1 (a test)"
    status, output = _pib_run(tmp_path, *(["--ignore-logs"] if ignore else []), "--", "sh", "-c",
                              f"echo '{warning}' > /dev/kmsg")
    if ignore:
        assert status == 0, output
    else:
        assert status == 1, output
        assert "vm1 kernel: " in output and warning in output, output
        assert "the command passed, but the logs above show trouble" in output


def test_pib_run_with_a_topology_file_that_shares_a_tree_and_one_that_hides_the_system(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "from-host").write_text("shared by the topology file\n")
    # The default fabric's own topology, so that its snapshot restores it:
    # the share is not part of what a snapshot depends on.
    topo = tmp_path / "shared.topo"
    topo.write_text(f"switch switch1\nvm vm1 switch1:1\nvm vm2 switch1:2\nshare {tree}\n")
    status, output = _pib_run(tmp_path, "--topology", str(topo), "--", "cat", "from-host")
    assert status == 0 and "shared by the topology file" in output, output
    assert "restoring the fabric from its snapshot" in output, output
    status, output = _pib_run(tmp_path, "--share", "/etc", "--", "true")
    assert status == 125 and "the guests' own /etc would be hidden" in output, output


def test_pib_run_fails_a_passing_command_when_a_device_goes_fatal(tmp_path):
    """The host makes vm2's HCA FATAL while vm1's command waits; the
    command then passes, and the run fails."""
    env = dict(os.environ, PIB_RUN_DIR=str(tmp_path / "run"))
    pib = str(paths.REPO / "pib")
    run = subprocess.Popen([pib, "run", "--logs", str(tmp_path / "logs"), "--", "sh", "-c",
                            "echo waiting; while [ ! -e /run/go ]; do sleep 0.2; done"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    output = ""
    try:
        for line in run.stdout:
            output += line
            if line.strip() == "waiting":
                break
        for argv in (["inject", "vm2", "fatal", "a test of ./pib run"],
                     ["exec", "vm1", "--", "touch", "/run/go"]):
            done = subprocess.run([pib, *argv], capture_output=True, text=True, env=env,
                                  timeout=120)
            assert done.returncode == 0, done.stdout + done.stderr
        output += run.stdout.read()
        status = run.wait(timeout=300)
    finally:
        run.kill()
    print(output)
    assert status == 1, output
    assert re.search(r"vm2 qemu.log: .*pib_hca_fatal .*a test of ./pib run", output), output


def _pib_run_argv(command: str) -> list:
    """The ./pib arguments of a `pib run` in an example's shell line."""
    words = shlex.split(command.replace("\n", " "))
    for i, word in enumerate(words):
        if word.endswith(("/pib", "pib-hca:latest")) and words[i + 1:i + 2] == ["run"]:
            return words[i + 1:]
    raise AssertionError(f"no ./pib run in {command!r}")


def test_the_ci_examples_are_valid_and_run_what_pib_run_takes(ctx):
    examples = paths.REPO / "examples" / "ci"
    github = yaml.safe_load((examples / "github-actions.yml").read_text())
    steps = github["jobs"]["rdma"]["steps"]
    gitlab = yaml.safe_load((examples / "gitlab-ci.yml").read_text())
    lines = [s["run"] for s in steps if "pib-hca:latest" in s.get("run", "") and " run " in s["run"]]
    lines += [line for line in gitlab["rdma-tests"]["script"] if "/opt/pib-hca/pib run" in line]
    assert len(lines) == 2, lines
    parser = cli.build_parser()
    for line in lines:
        args = parser.parse_args(_pib_run_argv(line))
        assert args.func.__name__ == "_cmd_run" and args.share and args.junit, line
        assert args.argv[1:] == ["make", "-C", args.share, "check"], line
    assert "--device /dev/kvm" in lines[0], "the GitHub runner's KVM is passed in"
