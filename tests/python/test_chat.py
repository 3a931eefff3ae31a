"""pagoda chat driven as a person drives it, through a pseudo-terminal (prompts, commands, Ctrl-C
mid-reply, Ctrl-D), and as a script drives it, through a pipe (one message per line in, only the
replies out); `run --chat`, the instruct-model hint, the prompt from stdin, and the CLI's
one-line usage errors with their exit codes."""
import json
import os
import pathlib
import pty
import re
import select
import signal
import subprocess
import tempfile
import time

import pytest

from server_util import SMOLLM, chat_model, need

STATS = re.compile(r"prompt: (\d+) tokens, (\d+) from the prefix cache \| first token: "
                   r"[\d.]+ s \| reply: (\d+) tokens")


class Terminal:
    """`pagoda chat` on a pseudo-terminal: it is the session leader, so a typed Ctrl-C reaches it
    as SIGINT the way it does in a real terminal. stdout and stderr both land in `seen`."""

    def __init__(self, pagoda_bin, *args, env=None):
        if env is None:  # the history file goes to a fresh folder, not the user's
            env = dict(os.environ, XDG_STATE_HOME=tempfile.mkdtemp(prefix="pagoda-chat-"))
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            argv = [str(pagoda_bin), "chat", *map(str, args)]
            os.execve(str(pagoda_bin), argv, env)
        self.seen = ""
        self.transcript = ""  # everything the terminal showed, escape sequences included

    def expect(self, pattern, timeout=300):
        """Reads until `pattern` (a regex) matches the text after what earlier calls consumed;
        returns the text up to the end of the match."""
        deadline = time.time() + timeout
        while True:
            m = re.search(pattern, self.seen)
            if m:
                out, self.seen = self.seen[:m.end()], self.seen[m.end():]
                return out
            left = deadline - time.time()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {pattern!r}; saw {self.seen!r}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    data = os.read(self.fd, 4096)
                except OSError:  # the child closed the terminal
                    data = b""
                if not data:
                    raise AssertionError(f"chat ended waiting for {pattern!r}; saw {self.seen!r}")
                text = data.decode("utf-8", "replace").replace("\r\n", "\n")
                self.seen += text
                self.transcript += text

    def send(self, text):
        """Types `text` a moment after what came before, as a person does: keys that arrive
        before the line editor has put the terminal in raw mode are read by the terminal's own
        line discipline (Ctrl-R echoed as ^R, Ctrl-D taken as end of file, all held until
        Enter), for pagoda as for any libedit or readline program."""
        time.sleep(0.25)
        os.write(self.fd, text.encode())

    def wait(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            try:  # drain, so the child never blocks on a full terminal
                if select.select([self.fd], [], [], 0.1)[0]:
                    os.read(self.fd, 4096)
            except OSError:
                pass
        self.kill()
        raise AssertionError("chat did not exit")

    def kill(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def stats_of(text):
    m = STATS.search(text)
    assert m, text
    return tuple(int(g) for g in m.groups())


def test_two_turns_system_clear_and_ctrl_c_in_a_terminal(pagoda_bin):
    t = Terminal(pagoda_bin, "-m", chat_model(), "--temp", "0", "-t", "2", "-n", "200")
    try:
        t.expect(r"/help for commands")
        t.expect(r">>> ")
        t.send("What is the capital of France? Answer in one sentence.\n")
        first = t.expect(r">>> ")
        assert "Paris" in first
        prompt1, cached1, reply1 = stats_of(first)
        assert cached1 == 0 and reply1 > 0

        # The second turn's prompt starts with the whole first turn: its K/V comes from the
        # prefix cache (whole blocks of it).
        t.send("And of Germany?\n")
        second = t.expect(r">>> ")
        assert "Berlin" in second
        prompt2, cached2, _ = stats_of(second)
        assert prompt2 > prompt1
        assert cached2 >= 16 and cached2 >= (prompt1 // 16) * 16, second

        t.send("/stats\n")
        assert re.search(r"turns 2 \| prompt tokens \d+, \d+ from the prefix cache",
                         t.expect(r">>> "))

        t.send("/system Always answer in French.\n")
        assert "(system prompt set)" in t.expect(r">>> ")
        t.send("/clear\n")
        assert "(conversation cleared)" in t.expect(r">>> ")
        t.send("/clera\n")
        assert "did you mean '/clear'?" in t.expect(r">>> ")

        # Ctrl-C mid-reply stops that reply, and the chat goes on.
        t.send("Write a long story about a dragon, at least 500 words.\n")
        t.expect(r"\S{12}")  # some of the reply has streamed
        t.send("\x03")
        stopped = t.expect(r">>> ")
        assert "stopped (Ctrl-C)" in stopped
        # No token after the ^C the terminal echoed: the reply's line ends there. The newline
        # pagoda writes may be lost: the terminal flushes its output queue just after it sends
        # SIGINT (no NOFLSH), and a reply stopped within that moment has its newline dropped,
        # so the stats line can follow the ^C directly.
        assert re.search(r"\^C(\n|prompt: )", stopped), stopped
        t.send("What is 2 + 2? Answer with the number.\n")
        assert "4" in t.expect(r">>> ")

        t.send("\x04")  # Ctrl-D leaves
        assert t.wait() == 0
    finally:
        t.kill()


def test_second_ctrl_c_at_the_prompt_leaves(pagoda_bin):
    t = Terminal(pagoda_bin, "-m", need(SMOLLM), "-t", "1")
    try:
        t.expect(r">>> ")
        t.send("\x03")
        t.expect(r"Ctrl-C again")
        t.send("\x03")
        assert t.wait() == 0
    finally:
        t.kill()


def test_multi_line_input_is_one_message(pagoda_bin, tmp_path):
    saved = tmp_path / "chat.json"
    t = Terminal(pagoda_bin, "-m", need(SMOLLM), "--temp", "0", "-t", "2", "-n", "4")
    try:
        t.expect(r">>> ")
        t.send("first line\\\n")
        t.expect(r"\.\.\. ")
        t.send("second line\n")
        t.expect(r">>> ")
        t.send('"""\n')
        t.expect(r"\.\.\. ")
        t.send("a\n")
        t.expect(r"\.\.\. ")
        t.send("b\n")
        t.expect(r"\.\.\. ")
        t.send('"""\n')
        t.expect(r">>> ")
        t.send(f"/save {saved}\n")
        t.expect(r">>> ")
        t.send("/exit\n")
        assert t.wait() == 0
    finally:
        t.kill()
    messages = json.loads(saved.read_text())
    users = [m["content"] for m in messages if m["role"] == "user"]
    assert users == ["first line\nsecond line", "a\nb"]


def test_piped_chat_prints_only_the_replies(pagoda_bin, tmp_path):
    saved = tmp_path / "chat.json"
    script = ("/system You are a helpful assistant.\n"
              "What is the capital of France?\n"
              "And of Italy?\n"
              f"/save {saved}\n")
    r = subprocess.run([str(pagoda_bin), "chat", "-m", str(chat_model()), "--temp", "0", "-t", "2",
                        "-n", "40"], input=script.encode(), capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert ">>>" not in out and "prompt:" not in out
    # A blank line ends each reply, so replies of several lines stay apart.
    replies = out.strip().split("\n\n")
    assert out.endswith("\n\n") and len(replies) == 2, out
    assert "Paris" in out and "Rome" in out
    err = r.stderr.decode()
    turns = [stats_of(line) for line in err.splitlines() if STATS.search(line)]
    assert len(turns) == 2 and turns[1][1] > 0, err
    messages = json.loads(saved.read_text())
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]

    # /load takes the conversation back: the next question continues it.
    r = subprocess.run([str(pagoda_bin), "chat", "-m", str(chat_model()), "--temp", "0", "-t", "2",
                        "-n", "40"], input=f"/load {saved}\n/stats\n".encode(),
                       capture_output=True, timeout=600)
    assert r.returncode == 0 and "(loaded 5 messages" in r.stderr.decode()
    assert "history 5 messages" in r.stderr.decode()


def test_run_chat_is_one_templated_turn(pagoda_bin):
    r = subprocess.run([str(pagoda_bin), "run", "-m", str(chat_model()), "--chat", "--temp", "0",
                        "-t", "2", "-n", "32", "--system", "You are a helpful assistant.",
                        "-p", "What is the capital of France?"],
                       capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert "Paris" in out
    assert "<|im_start|>" not in out and "What is the capital" not in out  # only the reply


def test_run_with_a_plain_prompt_on_an_instruct_model_hints_chat(pagoda_bin):
    r = subprocess.run([str(pagoda_bin), "run", "-m", str(need(SMOLLM)), "-t", "1", "-n", "1",
                        "-p", "Hello"], capture_output=True, timeout=600)
    assert r.returncode == 0
    assert "has a chat template" in r.stderr.decode() and "--chat" in r.stderr.decode()


def test_run_reads_the_prompt_from_stdin(pagoda_bin, shared_dir):
    model = shared_dir / "models" / "stories260K.gguf"
    r = subprocess.run([str(pagoda_bin), "run", "-m", str(model), "--temp", "0", "-n", "8"],
                       input=b"The little dog", capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().startswith("The little dog was a little")
    r = subprocess.run([str(pagoda_bin), "run", "-m", str(model)], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=60)
    assert r.returncode == 2 and "no prompt" in r.stderr.decode()


@pytest.mark.parametrize("args, code, needle", [
    (["runn"], 2, "unknown command 'runn' (did you mean 'run'?)"),
    (["chta", "-m", "x"], 2, "unknown command 'chta' (did you mean 'chat'?)"),
    (["run", "-m", "x", "--tmep", "0"], 2, "unknown option '--tmep' for 'pagoda run' "
                                           "(did you mean '--temp'?)"),
    (["run", "-p", "hi"], 2, "--model is required"),
    (["bench", "latnecy"], 2, "did you mean 'latency'?"),
    (["run", "-m", "/nonexistent.gguf", "-p", "hi"], 1, "/nonexistent.gguf"),
])
def test_cli_errors_are_one_line_with_exit_codes(pagoda_bin, args, code, needle):
    r = subprocess.run([str(pagoda_bin), *args], capture_output=True, timeout=60)
    err = r.stderr.decode()
    assert r.returncode == code, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert needle in err, err


def test_help_shows_every_default(pagoda_bin):
    out = subprocess.run([str(pagoda_bin), "run", "--help"], capture_output=True,
                         timeout=60).stdout.decode()
    for needle in ("--temperature FLOAT=0.8", "--top-k INT=40", "=128", "--seed UINT=random"):
        assert needle in out, out


# A paste as a terminal sends it once the program turns bracketed paste on (tmux paste-buffer
# -p): between the markers, its line ends as CR.
PASTE = "Fix the bug in this Python:\ndef add(a, b):\n    return a - b\nprint(add(2, 3))"
UP, ENTER, CTRL_R = "\x1b[A", "\r", "\x12"


def bracketed(text):
    return "\x1b[200~" + text.replace("\n", "\r") + "\x1b[201~"


def terminal_env(tmp_path, term="xterm"):
    """The environment with TERM as given (None: unset) and the history under tmp_path."""
    env = {k: v for k, v in os.environ.items() if k not in ("TERM", "XDG_STATE_HOME")}
    if term:
        env["TERM"] = term
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    return env


def turn(t, text):
    """Sends `text` (keys), waits for the reply's figures and the next prompt; returns the
    output."""
    t.send(text)
    out = t.expect(STATS.pattern)
    return out + t.expect(r">>> ")


def saved_users(t, path):
    t.send(f"/save {path}{ENTER}")
    t.expect(r"\(saved \d+ messages")
    t.expect(r">>> ")
    return [m["content"] for m in json.loads(path.read_text()) if m["role"] == "user"]


def test_paste_recall_and_context_overflow_in_a_terminal(pagoda_bin, tmp_path):
    """A person's session on a real terminal (TERM=xterm, libedit): a pasted block is one
    message, Up brings it back, and a chat longer than -c 256 goes on by dropping old turns."""
    t = Terminal(pagoda_bin, "-m", need(SMOLLM), "--temp", "0", "-t", "2", "-n", "40", "-c",
                 "256", "--system", "You are terse.", env=terminal_env(tmp_path))
    try:
        t.expect(r"context 256 tokens")
        t.expect(r">>> ")
        turn(t, bracketed(PASTE) + ENTER)
        turn(t, UP + ENTER)  # the paste again, whole
        assert saved_users(t, tmp_path / "a.json") == [PASTE, PASTE]
        seen = ""
        for q in ("What is the capital of France?", "Name three colors.",
                  "What is two plus two?", "Tell me about the sea."):
            seen += turn(t, q + ENTER)
        assert re.search(r"\(the conversation outgrew the context of 256 tokens: dropped the "
                         r"\d+ oldest messages\)", seen), seen
        assert "error" not in seen, seen
        users = saved_users(t, tmp_path / "b.json")
        assert users[-1] == "Tell me about the sea." and len(users) < 6, users
        t.send("\x04")
        assert t.wait() == 0
    finally:
        t.kill()
    if os.environ.get("PAGODA_CHAT_TRANSCRIPT"):
        pathlib.Path(os.environ["PAGODA_CHAT_TRANSCRIPT"]).write_text(t.transcript)
    # The history file holds the paste as one entry; the next session recalls it (and Ctrl-R
    # finds it) from the file.
    history = tmp_path / "state" / "pagoda" / "history"
    assert history.exists() and "Fix" in history.read_text()
    t = Terminal(pagoda_bin, "-m", need(SMOLLM), "--temp", "0", "-t", "2", "-n", "4",
                 env=terminal_env(tmp_path))
    try:
        t.expect(r">>> ")
        turn(t, CTRL_R + "Fix the" + ENTER)
        assert saved_users(t, tmp_path / "c.json") == [PASTE]
        t.send("/exit" + ENTER)
        assert t.wait() == 0
    finally:
        t.kill()


def test_no_history_keeps_no_file(pagoda_bin, tmp_path):
    t = Terminal(pagoda_bin, "-m", need(SMOLLM), "-t", "1", "-n", "2", "--no-history",
                 env=terminal_env(tmp_path))
    try:
        t.expect(r">>> ")
        turn(t, "hello" + ENTER)
        t.send("/exit" + ENTER)
        assert t.wait() == 0
    finally:
        t.kill()
    assert not (tmp_path / "state" / "pagoda" / "history").exists()


def test_paste_is_one_message_without_term(pagoda_bin, tmp_path):
    """No TERM (no line editor): the paste markers are still understood in the raw input."""
    t = Terminal(pagoda_bin, "-m", need(SMOLLM), "--temp", "0", "-t", "2", "-n", "4",
                 env=terminal_env(tmp_path, term=None))
    try:
        t.expect(r">>> ")
        turn(t, bracketed(PASTE) + ENTER)
        assert saved_users(t, tmp_path / "a.json") == [PASTE]
        t.send("\x04")
        assert t.wait() == 0
    finally:
        t.kill()


def test_piped_chat_stops_with_an_error_on_a_message_too_long(pagoda_bin):
    script = "Hello\n" + "word " * 400 + "\nNever sent\n"
    r = subprocess.run([str(pagoda_bin), "chat", "-m", str(need(SMOLLM)), "--temp", "0", "-t",
                        "2", "-n", "4", "-c", "256"], input=script.encode(), capture_output=True,
                       timeout=120)
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert re.search(r"error: the message makes a prompt of \d+ tokens and the context holds 256",
                     err), err
    assert len([line for line in err.splitlines() if STATS.search(line)]) == 1, err


def test_default_context_follows_the_model(pagoda_bin):
    r = subprocess.run([str(pagoda_bin), "chat", "-m", str(need(SMOLLM)), "-t", "1"],
                       input=b"/stats\n", capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    m = re.search(r"KV cache .* for (\d+) tokens", r.stderr.decode())
    # SmolLM2 was trained on 8192 tokens: that, unless memory is short.
    assert m and 4096 < int(m.group(1)) <= 8192, r.stderr.decode()
