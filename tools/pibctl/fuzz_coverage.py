"""What a fuzz target's corpus reaches: after a campaign, ./pib fuzz replays
the corpus once through a build of the harness with clang's source-based
coverage, and names the functions of the code the target is about that no
input ran. A fuzzer that never gets past the first checks of a transport
still reports no findings; this says so."""

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from pibctl import core_build, source_tree, ui

# Per target: the sources whose functions every campaign should reach.
SOURCES = {
    "core": [f"qemu-hw/core/src/{name}.cc" for name in
             ("responder", "completer", "requester", "transport", "receive_wqes", "flush",
              "datagram", "dispatch", "memory_keys", "link", "link_rings", "cq_moderation",
              "event_writer")],
    "mlx5": [f"qemu-hw/core/src/mlx5/mlx5_{name}.cc" for name in
             ("command_queue", "commands", "commands_mkey", "commands_port", "completion_queues",
              "event_queues", "front_end", "hca_caps", "init_segment", "page_list", "pages",
              "queue_pairs", "registers", "shared_receive_queues", "uars", "umr", "umr_indirect",
              "umr_window", "vsc", "wqe_reader", "dc_targets", "user_contexts", "commands_uctx",
              "user_memories", "commands_umem", "general_objects")] +
            [f"qemu-hw/core/src/{name}.cc" for name in
             ("dc_targets", "memory", "indirect_key", "memory_key_indirect", "page_faults")],
    "switch": [f"fabric-switch/src/{name}.cc" for name in ("switch", "sma", "pma", "trap", "fault")],
    "sim-fabric": [f"fabric-switch/src/{name}.cc" for name in
                   ("sim_ca", "sim_fabric", "sim_fabric_faults", "switch", "sma", "trap")],
    "switch-tcp": [f"fabric-switch/src/{name}.cc" for name in
                   ("server", "server_control", "server_dial", "server_faults", "server_flow",
                    "server_rings", "server_moves")] + ["common/wire/ring_cable.cc"],
    "packet": ["common/iba/packet.cc", "common/wire/frame.cc"],
    "state": [f"qemu-hw/core/src/{name}.cc" for name in
              ("device_state", "pib/pib_state", "transport_state", "mlx5/mlx5_state",
               "mlx5/mlx5_state_queues", "mlx5/mlx5_dc_targets", "dc_targets",
               "mlx5/mlx5_user_contexts", "mlx5/mlx5_user_memories",
               "mlx5/mlx5_general_objects")] +
             ["common/state/state_archive.cc"],
    "switch-state": [f"fabric-switch/src/{name}.cc" for name in ("switch_state", "server_state")] +
                    ["common/state/state_archive.cc"],
}
# Per target: functions named on their own, wherever they are, because
# they are where a harness stuck at the first checks never gets.
WATCHED = {
    "core": ["Responder::completeReceive", "Responder::invalidateForPeer",
             "ReceiveWqes::completeClaimedWqe", "Responder::forgetXrcSrq", "DataPath::flushQp",
             "CommandProcessor::resizeCq", "CommandProcessor::resizeSrq",
             "MemoryKeys::bindWindow", "MemoryKeys::invalidateLocal",
             "MemoryKeys::invalidateRemote", "TransportRole::waitForPage",
             "Responder::answerPageFault", "CommandProcessor::pageFaultResume",
             "MemoryAccess::mapImplicit", "MemoryRegions::checkChild"],
    "mlx5": ["mlx5::FunctionPages::give", "mlx5::FunctionPages::take", "mlx5::HcaCaps::apply",
             "mlx5::CommandQueue::chain", "mlx5::Commands::accessRegister",
             "mlx5::EventQueues::doorbell", "mlx5::EventQueues::write", "mlx5::Commands::madIfc",
             "mlx5::Commands::createMkey", "mlx5::WqeReader::decodeSend",
             "mlx5::WqeReader::readReceive", "mlx5::QueuePairs::modify",
             "mlx5::QueuePairs::freePort", "mlx5::Registers::firmware",
             "mlx5::WqeReader::pollSrqProducer", "mlx5::VendorCapability::write",
             "mlx5::Commands::createMttMkey", "MemoryKeys::update", "MemoryKeys::storeEntries",
             "MemoryRegions::insertWithPages", "TransportRole::waitForPage",
             "DataPath::resumePageFault", "DataPath::expirePageFaults",
             "Responder::answerPageFault", "mlx5::EventQueues::postPageFault",
             "mlx5::Commands::createKsmMkey", "MemoryAccess::mapKsm",
             "MemoryAccess::reachesEntry"],
    "sim-fabric": ["fabric::SimulatedCa::lidRouted", "fabric::SimulatedCa::setPortInfo",
                   "fabric::SimulatedFabric::setLink", "fabric::SimulatedFabric::takeLinkResets",
                   "fabric::SimulatedFabric::command"],
}


def build_dir() -> Path:
    return source_tree.build_dir("fuzz-coverage")


def build(executables) -> None:
    """The harnesses with coverage counters and no sanitizers: a replay
    only counts."""
    flags = "-fprofile-instr-generate -fcoverage-mapping -fsanitize=fuzzer-no-link"
    env = dict(os.environ, CC="ccache clang", CXX="ccache clang++")
    core_build.configure_dir(build_dir(), [
        "-Dfuzzers=true", "-Db_lundef=false", f"-Dcpp_args={flags}", f"-Dc_args={flags}",
        "-Dcpp_link_args=-fprofile-instr-generate", "-Dc_link_args=-fprofile-instr-generate"],
        env=env)
    core_build.ninja(build_dir(), [f"tests/fuzz/{exe}" for exe in executables],
                     "ninja (fuzzers with coverage)", env=env)


def _llvm_tool(name: str) -> str:
    """An LLVM tool: Debian's llvm package installs llvm-cov and friends
    unversioned; llvm-N alone only as llvm-cov-N."""
    if shutil.which(name):
        return name
    versioned = sorted(Path("/usr/bin").glob(f"{name}-[0-9]*"),
                       key=lambda p: int(p.name.rsplit("-", 1)[1]))
    if versioned:
        return str(versioned[-1])
    raise ui.StepFailed(f"{name} is missing: apt-get install llvm")


def _functions(executable: str, inputs) -> list:
    """Replays `inputs` (corpus directories) once; each function of the
    harness with its source file and its execution count."""
    binary = build_dir() / "tests" / "fuzz" / executable
    with tempfile.TemporaryDirectory() as scratch:
        env = dict(os.environ, LLVM_PROFILE_FILE=f"{scratch}/%p.profraw")
        proc = subprocess.run([binary, "-runs=0", *[str(d) for d in inputs]], env=env,
                              capture_output=True, text=True, errors="replace", timeout=1800)
        raws = list(Path(scratch).glob("*.profraw"))
        if proc.returncode != 0 or not raws:
            raise ui.StepFailed(f"the coverage replay of {executable} failed:\n"
                                f"{proc.stderr[-3000:]}")
        merged = Path(scratch) / "merged.profdata"
        subprocess.run([_llvm_tool("llvm-profdata"), "merge", "-sparse", "-o", merged, *raws],
                       check=True, capture_output=True)
        exported = subprocess.run([_llvm_tool("llvm-cov"), "export", "-skip-expansions", binary,
                                   f"-instr-profile={merged}"],
                                  check=True, capture_output=True, text=True).stdout
    functions = json.loads(exported)["data"][0]["functions"]
    demangled = subprocess.run([_llvm_tool("llvm-cxxfilt")],
                               input="\n".join(f["name"] for f in functions),
                               capture_output=True, text=True, check=True).stdout.splitlines()
    return [(_readable(name), Path(f["filenames"][0]).resolve(), f["count"])
            for name, f in zip(demangled, functions)]


def _readable(demangled: str) -> str:
    """pib::DataPath::flushQp(unsigned int, pib::QueuePair&) -> DataPath::flushQp; a
    lambda is named by the function it is in."""
    name = re.sub(r"^[\w.]+\.cc:", "", demangled)  # file-local functions carry their file
    head, _, rest = name.partition("(")
    head = re.sub(r"^pib::(\w+::)?\(anonymous namespace\)::", "", head)
    head = re.sub(r"^pib::", "", head)
    return f"{head} (a lambda in it)" if "::$_" in rest or "lambda" in rest else head


def _counts(functions, wanted) -> dict:
    """Execution counts by function name, over the files `wanted` (all of
    them when None). A function instantiated several times counts once."""
    counts = {}
    for name, source, count in functions:
        try:
            relative = str(source.relative_to(source_tree.src_dir()))
        except ValueError:
            continue
        if wanted is None or relative in wanted:
            key = (Path(relative).name, name)
            counts[key] = counts.get(key, 0) + count
    return counts


def report(target: str, executable: str, inputs) -> None:
    """Prints the functions of SOURCES[target] that no input of `inputs`
    reached, and whether each of WATCHED[target] was reached."""
    functions = _functions(executable, inputs)
    counts = _counts(functions, set(SOURCES.get(target, [])))
    never = sorted(key for key, count in counts.items() if count == 0)
    files = ", ".join(Path(s).name for s in SOURCES.get(target, []))
    ui.detail(f"{target}: {len(never)} of {len(counts)} functions of {files} never reached"
              + (":" if never else ""))
    for source, name in never:
        ui.detail(f"  {source}: {name}")
    everywhere = _counts(functions, None)
    for watched in WATCHED.get(target, []):
        # A function returning std::string or the like demangles with its
        # ABI tag (fabric::SimulatedFabric::command[abi:cxx11]).
        calls = [c for (_, name), c in everywhere.items()
                 if name.replace("[abi:cxx11]", "") == watched]
        runs = sum(calls)
        ui.detail(f"{target}: {watched} " + (
            f"reached ({runs} calls)" if runs else
            "NEVER reached" if calls else "not in the build: a name misspelt?"))
