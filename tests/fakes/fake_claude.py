#!/usr/bin/env python3
"""A stand-in for the `claude` CLI, for fast tests of parsing and faults.

It speaks the stream-json shape the real CLI prints (init line, assistant messages, result)
and misbehaves on request. What it does comes from the JSON file named by PONYBENCH_FAKE (or that JSON itself):

  write:    {relative path: content} to write into the working directory
  answer:   the final text
  mode:     (or env PONYBENCH_FAKE_MODE) "ok" (default), "hang" (sleep forever with children), "garbage", "crash",
            "flood" (print `flood_mb` MiB without newlines, then exit 0), "no_result",
            "error_result", "root_refusal", "escape" (also write `escape_to`, default
            "escaped-by-agent.txt", in the parent of the workspace, with its Write tool call),
            "escape_hook" (the same write with no tool call, as a hook would: `escape_to`,
            default "escaped-by-hook.txt"),
            "hang_tree" (like "hang", its child printing its pid to stderr as `fake-pid: N`),
            "fill_disk" (write fill.bin until the disk is full, then finish),
            "spawn_setsid" (leave a setsid grandchild sleeping, pid on stderr, and finish),
            "sleep_then_ok" (sleep `sleep` seconds, then finish), "await_peers" (finish once
            `peers` CLIs run at once, registered in `peers_dir`; fail after `sleep` s), "kill_worker" (name
            the process that started the harness's supervisor, e.g. an xdist worker, in
            `worker_pid_file` for the test to kill, then hang: the CLI itself cannot, see below)
  Pids printed or written are the host's: the harness runs an unconfined CLI in a PID
  namespace of its own where it can (there os.getpid() is the namespace's number), but /proc
  is still the host's, so /proc/self names the host's pid and /proc/<pid>/stat the host's parent.
  sleep_before_write: seconds to sleep before the `write` files are written
  cells:    {cell id: {keys as above}}: overrides for the cell whose workspace (the working
            directory) has that name, e.g. one hanging cell among good ones
  api errors: mode "api_error" (2 api_retry lines, the CLI's API error line and a result with
            terminal_reason api_error; `api_status`, default 529, and `api_type`), "api_retry_hang"
            (api_retry lines, then hang until killed), "api_cut" (an api_retry line, then exit 1 with
            no result); `api_error_times: N` plays "api_error" for the first N calls in a workspace
            of that name only (counted in a file beside the spec), then `mode`
  hooks:    [hook_response fields] printed before the init line (--include-hook-events), after
            those of the --plugin-dir plugin's SessionStart command hooks, which the fake runs
  skills:   the init line's skills
  tool_uses: [[name, input], ...] played as tool_use blocks (each followed by its tool_result)
  extra_plugins / extra_tools: added to the init line (a wrong arm)
  drop_plugin: leave the --plugin-dir plugin out of the init line
  cost, input_tokens, output_tokens: usage figures
  odd_files: also leave what no ordinary program copies: a file `deep` folders down (default
            1200, a 2.4 kB path), a named pipe, a unix socket and a link to /etc/hostname
  calls:    a file to which one line per invocation is appended
The real binary is tested end to end against the scripted model server (tests/test_e2e.py).
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def arg(argv, flag):
    return argv[argv.index(flag) + 1] if flag in argv else None


def host_pid():
    """This process's pid as the host (and the test) sees it, in a PID namespace or not."""
    return int(os.readlink("/proc/self"))


def host_parent(pid):
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2:].split()[1])  # the command name may hold spaces


# A child's line for the test: its host pid on stderr, then it sleeps.
SLEEPER = ("import os, sys, time; print('fake-pid:', os.readlink('/proc/self'), file=sys.stderr, flush=True); "
           "time.sleep(600)")


def main(argv):
    if argv[:1] == ["--version"]:
        print("2.1.328 (Claude Code)")
        return 0
    said = os.environ.get("PONYBENCH_FAKE") or ""
    # The spec itself where no file of the host is in view (a confined cell sees no project).
    spec = json.loads(said) if said.startswith("{") else json.loads(Path(said).read_text()) if said else {}
    spec.update(spec.get("cells", {}).get(Path.cwd().name, {}))
    if spec.get("calls"):
        with open(spec["calls"], "a") as fh:
            fh.write(json.dumps({"cwd": os.getcwd(), "argv": argv}) + "\n")
    mode = os.environ.get("PONYBENCH_FAKE_MODE") or spec.get("mode", "ok")
    if spec.get("api_error_times"):
        counter = Path(os.environ["PONYBENCH_FAKE"]).with_name(f"attempts-{Path.cwd().name}")
        seen = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(seen + 1))
        if seen < int(spec["api_error_times"]):
            mode = "api_error"
    if mode == "root_refusal":
        print("--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons",
              file=sys.stderr)
        return 1
    if mode == "crash":
        print("Segmentation fault (pretend)", file=sys.stderr)
        return 139
    if mode == "garbage":
        print("this is not json\n{half a line")
        return 0
    if mode == "flood":
        chunk = "x" * (1024 * 1024)
        for _ in range(int(spec.get("flood_mb", 50))):
            sys.stdout.write(chunk)
        sys.stdout.flush()
        return 0
    plugins = [{"name": "builtin-thing", "path": "builtin", "source": "builtin"}]
    plugin_dir = arg(argv, "--plugin-dir")
    if plugin_dir and not spec.get("drop_plugin"):
        plugins.append({"name": Path(plugin_dir).name, "path": plugin_dir, "source": "inline"})
    plugins += spec.get("extra_plugins", [])
    tools = ["Read", "Write", "Edit", "Glob", "Grep"] + spec.get("extra_tools", [])
    if "Bash" not in (arg(argv, "--disallowedTools") or ""):
        tools.append("Bash")
    for hook in (plugin_hooks(plugin_dir) + spec.get("hooks", [])) if "--include-hook-events" in argv else []:
        emit({"type": "system", "subtype": "hook_response", "hook_name": "SessionStart:startup",
              "hook_event": "SessionStart", "stdout": "", "stderr": "", "exit_code": 0, "outcome": "success", **hook})
    emit({"type": "system", "subtype": "init", "claude_code_version": "2.1.328", "model": arg(argv, "--model"),
          "tools": tools, "plugins": plugins, "cwd": os.getcwd(), "permissionMode": arg(argv, "--permission-mode"),
          "skills": spec.get("skills", [])})
    if mode in ("api_error", "api_retry_hang", "api_cut"):
        status = int(spec.get("api_status", 529))
        kind = spec.get("api_type", "overloaded_error")
        for attempt in (1, 2):
            emit({"type": "system", "subtype": "api_retry", "attempt": attempt, "max_retries": 2,
                  "retry_delay_ms": 500, "error_status": status, "error": kind})
        if mode == "api_retry_hang":
            time.sleep(600)
        if mode == "api_cut":
            return 1
        text = f"API Error: {status} {kind}"
        emit({"type": "assistant", "is_api_error_message": True, "error": kind,
              "message": {"id": "synthetic", "model": "<synthetic>", "role": "assistant",
                          "content": [{"type": "text", "text": text}]}})
        emit({"type": "result", "subtype": "success", "is_error": True, "terminal_reason": "api_error",
              "api_error_status": status, "api_error_type": kind, "result": text, "num_turns": 1,
              "duration_ms": 900, "total_cost_usd": spec.get("api_error_cost", 0.0), "usage": {},
              "modelUsage": {}, "permission_denials": []})
        return 1
    usage = {"input_tokens": spec.get("input_tokens", 100), "output_tokens": spec.get("output_tokens", 20),
             "cache_read_input_tokens": 5, "cache_creation_input_tokens": 7}
    emit({"type": "assistant", "message": {"id": "msg_1", "role": "assistant", "usage": usage,
                                           "content": [{"type": "text", "text": "Working on it."}]}})
    for n, (name, tool_input) in enumerate(spec.get("tool_uses", [])):
        emit({"type": "assistant", "message": {"id": f"msg_tool_{n}", "role": "assistant", "content": [
            {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": tool_input}]}})
        emit({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "ok"}]}})
    time.sleep(float(spec.get("sleep_before_write", 0)))
    for rel, content in spec.get("write", {}).items():
        target = Path(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    if spec.get("odd_files"):
        leave_odd_files(int(spec.get("deep", 1200)))
    if mode == "fill_disk":
        # A hostile or careless agent fills the disk of its workspace, then its CLI finishes.
        try:
            with open("fill.bin", "wb") as fh:
                while True:
                    fh.write(b"\0" * 65536)
        except OSError:
            pass
    if mode == "escape":
        # As the real CLI would: the agent's Write tool call, its result, and the file.
        target = Path("..", spec.get("escape_to", "escaped-by-agent.txt")).resolve()
        target.write_text("outside")
        emit({"type": "assistant", "message": {"id": "msg_escape", "role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_escape", "name": "Write",
             "input": {"file_path": str(target), "content": "outside"}}]}})
        emit({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_escape", "content": "File created"}]}})
    if mode == "escape_hook":
        # Like a plugin's hook: the file appears beside the workspace with no tool call.
        Path("..", spec.get("escape_to", "escaped-by-hook.txt")).write_text("outside")
    if mode == "sleep_then_ok":
        time.sleep(float(spec.get("sleep", 2)))
    if mode == "await_peers":
        # Proof that cells run at once: wait (at most `sleep` s) until `peers` CLIs, this one
        # included, have announced themselves in `peers_dir`; fail if they never do.
        peers_dir = Path(spec["peers_dir"])
        peers_dir.mkdir(parents=True, exist_ok=True)
        (peers_dir / str(host_pid())).touch()  # checked in /proc below, which is the host's
        deadline = time.monotonic() + float(spec.get("sleep", 60))
        met = set()  # peers seen alive beside this one (a finished one stays counted)
        while len(met) < int(spec["peers"]):
            met |= {p.name for p in peers_dir.iterdir() if Path("/proc", p.name).exists()}
            if time.monotonic() > deadline:
                print(f"only {len(met)} of {spec['peers']} peers ran at once", file=sys.stderr)
                return 1
            time.sleep(0.05)
    if mode == "spawn_setsid":
        # Double fork: the grandchild leads its own session and its parent is gone, so only a
        # subreaper (or init) is left to own it.
        read, write = os.pipe()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.close(read)
                os.write(write, str(host_pid()).encode())
                os.close(write)
                time.sleep(600)
            os._exit(0)
        os.close(write)
        grandchild = os.read(read, 32).decode()
        print(f"fake-pid: {grandchild}", file=sys.stderr, flush=True)
    if mode == "kill_worker":
        # Above the CLI are the namespace's init, the harness's supervisor and its fork server
        # (all forks of pytest_ponybench.processes.forkserver); above them, the process that ran the cell (an
        # xdist worker). From its own PID namespace the CLI cannot signal it: the test does.
        worker = host_parent(host_pid())
        while b"pytest_ponybench.processes.forkserver" in Path(f"/proc/{worker}/cmdline").read_bytes():
            worker = host_parent(worker)
        print(f"fake-pid: {worker}", file=sys.stderr, flush=True)
        named = Path(spec["worker_pid_file"])
        named.with_suffix(".tmp").write_text(str(worker))
        named.with_suffix(".tmp").replace(named)  # whole when the test reads it
        time.sleep(600)
    if mode == "hang_tree":
        subprocess.Popen([sys.executable, "-c", SLEEPER])
        time.sleep(600)
    if mode == "hang":
        # A child that would outlive a careless kill, then block forever.
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        time.sleep(600)
    if mode == "no_result":
        return 0
    emit({"type": "result", "subtype": "error_during_execution" if mode == "error_result" else "success",
          "is_error": mode == "error_result", "result": spec.get("answer", "Done."), "num_turns": 2,
          "duration_ms": 1500, "duration_api_ms": 1200, "total_cost_usd": spec.get("cost", 0.0123),
          "usage": usage, "modelUsage": {arg(argv, "--model"): {"costUSD": spec.get("cost", 0.0123)}},
          "permission_denials": [], "stop_reason": "end_turn"})
    return 0


def leave_odd_files(depth):
    """A file `depth` folders down (made one folder at a time: os.makedirs and Path.mkdir
    recurse), a FIFO, a bound unix socket and a link out of the workspace."""
    here = os.open(".", os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("d")
        os.chdir("d")
    Path("deep.txt").write_text("deep\n")
    os.fchdir(here)
    os.close(here)
    os.mkfifo("pipe")
    import socket
    sock = socket.socket(socket.AF_UNIX)
    sock.bind("sock")
    sock.close()
    os.symlink("/etc/hostname", "outside.txt")


def plugin_hooks(plugin_dir):
    """Run the SessionStart command hooks of the --plugin-dir plugin, as the CLI does: their
    hook_response fields."""
    try:
        declared = json.loads((Path(plugin_dir) / "hooks" / "hooks.json").read_text())["hooks"]
    except (TypeError, OSError, ValueError, KeyError):
        return []
    found = []
    for group in declared.get("SessionStart", []):
        for hook in group.get("hooks", []):
            done = subprocess.run(["sh", "-c", hook["command"]], capture_output=True, text=True, timeout=30)
            found.append({"stdout": done.stdout, "stderr": done.stderr, "output": done.stdout + done.stderr,
                          "exit_code": done.returncode, "outcome": "success" if done.returncode == 0 else "error"})
    return found


def emit(event):
    print(json.dumps(event), flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
