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
#
# With "mode": "feedback" the job is the level_feedback transition's analysis instead (see
# _feedback below); its events are JSON objects, one per line.
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
    if job.get("mode") == "feedback":
        _feedback(job, out)
        return
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


def _misuse(main):
    """The aux calls whose result the main function drops, as "Line N: reason" strings: the
    behaviour of `check_aux_call_without_usage(main, "aux")` in the environment repository.
    Its quirk is kept: a Name read is only known once the walk has passed it, so an aux call
    is judged on the reads that come before it in the tree's field order (its own arguments
    and the later lines are not yet seen)."""
    import ast

    if not main or "aux" not in main:
        return []
    try:
        tree = ast.parse(main)
    except SyntaxError:
        return []
    parent = {}
    reads = {}
    found = []

    def later_use_or_reassignment(name, line):
        # Only reached when a read after `line` was already seen: is `name` assigned again
        # (anywhere in the tree, by a plain assignment) on a line before its first read?
        again, used = [], []
        for n in ast.walk(ast.parse(main)):
            if isinstance(n, ast.Assign) and n.lineno > line:
                again += [n.lineno for t in n.targets if isinstance(t, ast.Name) and t.id == name]
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load):
                if n.lineno > line:
                    used.append(n.lineno)
        if again and min(again) < (min(used) if used else float("inf")):
            return min(again)
        return None

    def judge(call):
        up = parent.get(call)
        if up is None or isinstance(up, ast.Expr):
            return "standalone call (not assigned)"
        if isinstance(up, (ast.Return, ast.Call, ast.BinOp, ast.UnaryOp, ast.Compare)):
            return None
        if isinstance(up, (ast.If, ast.While)) and up.test == call:
            return None
        if isinstance(up, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
            return None
        if isinstance(up, ast.Assign):
            for t in up.targets:
                if not isinstance(t, ast.Name):
                    continue
                if not [l for l in reads.get(t.id, []) if l > up.lineno]:
                    return f"assigned to {t.id} but never used"
                again = later_use_or_reassignment(t.id, up.lineno)
                if again:
                    return f"assigned to {t.id} but reassigned on line {again} before use"
        return None

    def walk(node):
        for child in ast.iter_child_nodes(node):
            parent[child] = node
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "aux":
            reason = judge(node)
            if reason:
                found.append(f"Line {node.lineno}: {reason}")
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            reads.setdefault(node.id, []).append(node.lineno)
        for child in ast.iter_child_nodes(node):
            walk(child)

    walk(tree)
    return found


def _feedback(job, out):
    """The analysis of the level_feedback transition (external/level_feedback.py): the syntax
    check of the joint program with the SyntaxError's text, the aux misuse check, and each
    extracted test run on its own with the exception's type and text. Events:
    {"misuse": [...]}, {"syntax": true} or {"syntax": false, "text", "line", "offset", "msg"},
    {"load": [type, text]} (defining the program raised), {"test": i, "ok": true} or
    {"test": i, "ok": false, "error": [type, text]}, {"done": true}."""
    import ast
    import json
    import math
    import signal

    def emit(**event):
        out.write(json.dumps(event) + "\n")
        out.flush()

    emit(misuse=_misuse(job["main_func"]))
    code = job["code"]
    try:
        ast.parse(code)
    except SyntaxError as e:
        emit(syntax=False, text=str(e), line=e.lineno, offset=e.offset, msg=e.msg)
        emit(done=True)
        return
    emit(syntax=True)
    tests = job["tests"]
    if not tests:
        emit(done=True)
        return

    class TimeoutException(Exception):
        pass

    def on_alarm(signum, frame):
        raise TimeoutException("Code execution timed out")

    scope = {"math": math}
    try:
        exec(code, scope)
    except Exception as e:
        emit(load=[type(e).__name__, str(e)])
        emit(done=True)
        return
    limit = int(job["test_timeout"])
    timeouts = 0
    for i, test in enumerate(tests):
        try:
            signal.signal(signal.SIGALRM, on_alarm)
            signal.alarm(limit)
            exec(test, scope)
            emit(test=i, ok=True)
            signal.alarm(0)
        except TimeoutException as e:
            timeouts += 1
            emit(test=i, ok=False, error=["TimeoutException", str(e) or "test execution timed out"])
            signal.alarm(0)
            if timeouts >= int(job["max_timeouts"]):
                break
        except Exception as e:
            emit(test=i, ok=False, error=[type(e).__name__, str(e)])
            signal.alarm(0)
    emit(done=True)


_main()
