"""Session 13 (issue 26): a static doctor's timeline, one run: when the process started, when envbuild's own imports
were done, when the stack probe was launched, wrote its answer and exited, when the session's checks ended, when
the report was written and printed. Runs `envbuild doctor ARGS` in this process with those functions wrapped;
prints one JSON line on fd 3 (or stderr) with seconds since the process started.
Usage: python3 s13_timeline.py doctor --json R.json --quiet"""
import os, sys, time

with open("/proc/uptime") as fh:
    _up = float(fh.read().split()[0])
with open("/proc/self/stat") as fh:
    _start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
START = time.time() - (_up - _start_ticks / os.sysconf("SC_CLK_TCK"))
marks = []


def mark(name):
    marks.append((name, round(time.time() - START, 3)))


mark("script start")
import envbuild.cli as cli  # noqa: E402
mark("envbuild.cli imported")
import envbuild.doctor.session as session  # noqa: E402
import envbuild.doctor.stack_reader as reader  # noqa: E402
import envbuild.doctor.launcher as launcher  # noqa: E402
mark("session, stack_reader, launcher imported")


def wrap(mod, name, label):
    real = getattr(mod, name)

    def inner(*a, **k):
        mark(label + " start")
        try:
            return real(*a, **k)
        finally:
            mark(label + " end")
    setattr(mod, name, inner)


_launch = launcher.launch


def launch(payload, *a, **k):
    mark("launch %s start" % payload)
    run_dir = k.get("run_dir")
    try:
        return _launch(payload, *a, **k)
    finally:
        mark("launch %s returned" % payload)
        if run_dir:
            for root, _, files in os.walk(run_dir):
                for f in files:
                    if f.endswith(".json"):
                        marks.append(("%s answer file written (%s)" % (payload, f),
                                      round(os.stat(os.path.join(root, f)).st_mtime - START, 3)))


launcher.launch = launch
wrap(reader, "read_stack", "read_stack")
wrap(session, "run_session", "run_session")
wrap(session, "_write_reports", "write reports")
import envbuild.report.terminal as terminal  # noqa: E402
wrap(terminal, "print_report", "print report")
import atexit, json  # noqa: E402


@atexit.register
def _dump():
    mark("exit")
    try:
        os.write(3, (json.dumps(marks) + "\n").encode())
    except OSError:
        sys.stderr.write(json.dumps(marks) + "\n")


cli.main(sys.argv[1:])
