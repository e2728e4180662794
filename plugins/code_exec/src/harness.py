# The sandboxed half of the code_exec reward: level 2 (does the joint program parse?) and
# level 3 (run it, then each extracted test assert under its own SIGALRM timeout), with the
# control flow of `execution_reward_aux` at the pinned commit, which decides what counts:
# a test passes when evaluating `f(args)` and the expected value, formatting both, and the
# assert all succeed; 3 timeouts stop the tests; an exception raised while reporting a
# failure abandons the remaining tests and the test reward. The plugin computes the reward.
#
# Input: job.json in the working directory (deleted once read): {"code", "tests",
# "test_timeout", "max_timeouts"}. Output: one event per line on fd 3:
#   syntax 0|1, loaded, pass I, fail I, timeout I, added N (the test reward counts N passes),
#   abandoned (the loop ended by an exception), done.
import os
import sys


def _main():
    import json
    import math
    import re
    import signal

    out = os.fdopen(3, "w", buffering=1)

    def emit(*words):
        out.write(" ".join(str(w) for w in words) + "\n")
        out.flush()

    with open("job.json", encoding="utf-8") as f:
        job = json.load(f)
    os.remove("job.json")
    code = job["code"]
    tests = job["tests"]
    limit = int(job["test_timeout"])
    max_timeouts = int(job["max_timeouts"])
    del job

    try:
        # ast.parse(code) without importing ast (a third of the start-up time): the same
        # compile call with PyCF_ONLY_AST.
        compile(code, "<unknown>", "exec", 0x400)
    except BaseException:
        emit("syntax", 0)
        return
    emit("syntax", 1)
    if not tests:
        emit("done")
        return

    class TestTimeout(Exception):
        pass

    def on_alarm(signum, frame):
        raise TestTimeout("Code execution timed out")

    call = re.compile(r"assert\s+(\w+)\(([^)]*)\)\s*==\s*(.+)")
    scope = {"math": math}
    passed = 0
    timeouts = 0
    # The reference reads these through locals(), which keeps them across tests.
    matched = None
    have_actual = False
    have_expected = False
    actual = expected = None
    try:
        exec(code, scope)
        emit("loaded")
        for i, test in enumerate(tests):
            if timeouts >= max_timeouts:
                break
            try:
                signal.signal(signal.SIGALRM, on_alarm)
                signal.alarm(limit)
                matched = call.search(test)
                if matched:
                    actual = eval(f"{matched.group(1)}({matched.group(2)})", scope)
                    have_actual = True
                    expected = eval(matched.group(3), scope)
                    have_expected = True
                    f"{expected}"
                    f"{actual}"
                    exec(test, scope)
                else:
                    exec(test, scope)
                passed += 1
                emit("pass", i)
                signal.alarm(0)
            except TestTimeout:
                signal.alarm(0)
                timeouts += 1
                emit("timeout", i)
            except AssertionError as e:
                signal.alarm(0)
                emit("fail", i)
                if matched and have_actual and have_expected:
                    f"{expected}{actual}{actual}{expected}"
                else:
                    str(e)
            except Exception as e:
                signal.alarm(0)
                emit("fail", i)
                str(e)
        emit("added", passed)
    except Exception:
        signal.alarm(0)
        emit("abandoned")
    emit("done")


_main()
