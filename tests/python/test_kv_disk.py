"""--kv-disk: the prefix cache's disk tier through real processes. A prompt served after a
restart from the blocks the last run wrote gives the same greedy tokens and log-probabilities as
a server that computes it from scratch (stories260K at F32, F16 and q8_0 K/V; SmolLM2 at F16 and
q8_0); `pagoda run` twice says how many prompt tokens came from the disk; records truncated or
corrupted between runs are a miss (logged, deleted) and change nothing; a folder removed or made
unwritable while serving leaves the server answering the same; a second process on the folder
refuses in one line; another model's blocks in the folder are ignored, not deleted."""
import json
import pathlib
import shutil
import subprocess
import urllib.request

import pytest

from server_util import SMOLLM, Server, need, wait_for

PROMPT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in "
          "the park with her friends. One day, she saw a big red ball under a tree. She ran to "
          "the ball and picked it up. It was shiny and new. Lily wanted to keep the ball, but "
          "she knew it was not hers. She looked around for the owner of the ball and saw a boy")
OTHER = ("Tom had a small dog called Max. Every morning they walked to the river and watched "
         "the boats go by. Max liked to bark at the ducks, and Tom liked to throw sticks into "
         "the water. One day a big boat came by with a red flag on top of it, and the man on")


@pytest.fixture(scope="module")
def stories(shared_dir):
    return need(shared_dir / "models" / "stories260K.gguf")


def post(server, path, body):
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def complete(server, prompt=PROMPT, model=None):
    """Greedy tokens and their log-probabilities."""
    body = {"prompt": prompt, "max_tokens": 12, "temperature": 0, "logprobs": 1}
    if model:
        body["model"] = model
    r = post(server, "/v1/completions", body)
    lp = r["choices"][0]["logprobs"]
    return lp["tokens"], lp["token_logprobs"]


def stats(server):
    with urllib.request.urlopen(server.url + "/stats", timeout=30) as r:
        return json.loads(r.read())["kv_disk"]


def serve(pagoda_bin, model, folder, *args):
    extra = ("--kv-disk", folder) if folder is not None else ()
    return Server(pagoda_bin, model, "-t", "2", "--kv-tokens", "4096", "--max-model-len", "1024",
                  *extra, *args)


def records(folder):
    return sorted(pathlib.Path(folder).glob("*/*.kvb"))


def served_from_scratch(pagoda_bin, model, kv_type, prompts=(PROMPT,)):
    s = serve(pagoda_bin, model, None, "--kv-type", kv_type)
    try:
        return [complete(s, p) for p in prompts]
    finally:
        s.stop()


def check_same(got, want):
    assert got[0] == want[0]
    assert got[1] == want[1]  # log-probabilities exactly: the same K/V, the same arithmetic


def write_then_restart(pagoda_bin, model, folder, kv_type):
    """A server computes PROMPT (its blocks written behind), stops on SIGTERM (flushing them),
    and a second one serves it again from the disk: both answers, and the second's stats."""
    first = serve(pagoda_bin, model, folder, "--kv-type", kv_type)
    try:
        a = complete(first)
        assert first.terminate() == 0
    finally:
        first.stop()
    assert records(folder), "no block was written"
    second = serve(pagoda_bin, model, folder, "--kv-type", kv_type)
    try:
        b = complete(second)
        st = stats(second)
        # /metrics says the same as /stats.
        assert second.metric("pagoda_kv_disk_hit_tokens_total") == st["hit_tokens"]
        assert second.metric("pagoda_kv_disk_read_bytes_total") == st["bytes_read"]
        assert second.metric("pagoda_kv_disk_loads_in_flight") == st["loads_in_flight"] == 0
        return a, b, st, "".join(second.log)
    finally:
        second.stop()


@pytest.mark.parametrize("kv_type", ["f32", "f16", "q8_0"])
def test_a_restart_serves_the_prompt_from_disk_exactly(pagoda_bin, stories, tmp_path, kv_type):
    want = served_from_scratch(pagoda_bin, stories, kv_type)[0]
    a, b, st, _ = write_then_restart(pagoda_bin, stories, tmp_path / "kv", kv_type)
    check_same(a, want)
    check_same(b, want)
    assert st["hit_tokens"] > 0 and st["hit_blocks"] * 16 == st["hit_tokens"]
    assert st["bytes_read"] > 0 and st["loads"] >= st["hit_blocks"]


@pytest.mark.parametrize("kv_type", ["f16", "q8_0"])
def test_smollm2_from_disk_exactly(pagoda_bin, tmp_path, kv_type):
    model = need(SMOLLM)
    want = served_from_scratch(pagoda_bin, model, kv_type)[0]
    a, b, st, _ = write_then_restart(pagoda_bin, model, tmp_path / "kv", kv_type)
    check_same(a, want)
    check_same(b, want)
    assert st["hit_tokens"] > 0


def test_run_twice_says_what_came_from_the_disk(pagoda_bin, stories, tmp_path):
    cmd = [str(pagoda_bin), "run", "-m", str(stories), "-p", PROMPT, "-n", "12", "--temp", "0",
           "-t", "2", "-c", "512", "--kv-disk", str(tmp_path / "kv")]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert "(0 from the disk cache)" in first.stderr
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    import re
    m = re.search(r"prefill: (\d+) tokens \((\d+) from the disk cache\)", second.stderr)
    assert m, second.stderr
    assert int(m.group(2)) > 0 and int(m.group(2)) < int(m.group(1))


def serve_once(pagoda_bin, model, folder):
    """A server's answer to PROMPT, its /stats' kv_disk and its log; stopped on SIGTERM."""
    s = serve(pagoda_bin, model, folder)
    try:
        got = complete(s)
        st = stats(s)
        assert s.terminate() == 0
        return got, st, "".join(s.log)
    finally:
        s.stop()


def test_truncated_and_corrupted_records_are_misses(pagoda_bin, stories, tmp_path):
    folder = tmp_path / "kv"
    want = served_from_scratch(pagoda_bin, stories, "f16")[0]
    got, _, _ = serve_once(pagoda_bin, stories, folder)
    check_same(got, want)
    files = records(folder)
    assert len(files) >= 4
    sizes = {f: f.stat().st_size for f in files}
    # Every record with one flipped byte in its K/V: the first read fails its checksum.
    for f in files:
        data = bytearray(f.read_bytes())
        data[-7] ^= 0x40
        f.write_bytes(bytes(data))
    got, st, log = serve_once(pagoda_bin, stories, folder)
    check_same(got, want)
    assert st["hit_tokens"] == 0 and st["corrupt_records"] == 1
    assert "did not read back" in log and "a miss, the record is deleted" in log
    # The first block was written again, whole; the lookup now stops at the second (a record
    # already indexed is not rewritten until it is found unreadable).
    got, st, _ = serve_once(pagoda_bin, stories, folder)
    check_same(got, want)
    assert st["hit_tokens"] == 16 and st["corrupt_records"] == 1
    # Every record cut short: found when the folder is opened, deleted, then a miss.
    num_left = len(records(folder))
    for f in records(folder):
        f.write_bytes(f.read_bytes()[:-100])
    got, st, log = serve_once(pagoda_bin, stories, folder)
    check_same(got, want)
    assert "unreadable records deleted" in log
    assert st["hit_tokens"] == 0 and st["corrupt_records"] == num_left
    assert {f: f.stat().st_size for f in records(folder)} == sizes  # rewritten whole


def remove_folder(path):
    """Removes a folder the server's writer may be creating and renaming files in meanwhile: the
    folder is renamed away first (atomic; the server's paths then name nothing, as after a
    removal), and the renamed tree, which no path of the server names any more, is deleted."""
    path = pathlib.Path(path)
    gone = path.with_name(path.name + ".removed")
    path.rename(gone)
    shutil.rmtree(gone)


def replace_with_file(path):
    """Puts a file where the folder `path` is, while the server's writer may make it again."""
    while True:
        remove_folder(path)
        try:
            with open(path, "x") as f:
                f.write("not a folder")
            return
        except FileExistsError:  # the writer made the folder again in between
            continue


def test_the_folder_removed_or_unwritable_while_serving(pagoda_bin, stories, tmp_path):
    folder = tmp_path / "kv"
    third = PROMPT.replace("Lily", "Anna")
    want = served_from_scratch(pagoda_bin, stories, "f16", (PROMPT, OTHER, third))
    s = serve(pagoda_bin, stories, folder)
    try:
        check_same(complete(s), want[0])
        assert wait_for(lambda: stats(s)["written_blocks"] >= 4, 30)
        remove_folder(folder)
        check_same(complete(s), want[0])  # the pool still holds it
        check_same(complete(s, OTHER), want[1])
        assert wait_for(lambda: len(records(folder)) > 0, 30)  # the folder is made again
        # The model's subfolder replaced by a file: every write fails, answers do not change.
        sub = next(d for d in pathlib.Path(folder).iterdir() if d.is_dir())
        replace_with_file(sub)
        check_same(complete(s, third), want[2])
        assert wait_for(lambda: stats(s)["write_failures"] > 0, 30)
        check_same(complete(s), want[0])
    finally:
        s.stop()


def test_a_second_process_on_the_folder_refuses(pagoda_bin, stories, tmp_path):
    folder = tmp_path / "kv"
    s = serve(pagoda_bin, stories, folder)
    try:
        r = subprocess.run([str(pagoda_bin), "run", "-m", str(stories), "-p", "Hi", "-n", "2",
                            "--kv-disk", str(folder)], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        assert len(lines) == 1 and "in use by another pagoda process" in lines[0], r.stderr
    finally:
        s.stop()


def test_another_models_blocks_are_ignored(pagoda_bin, stories, tmp_path):
    folder = tmp_path / "kv"
    cmd = [str(pagoda_bin), "run", "-p", PROMPT, "-n", "4", "--temp", "0", "-t", "2", "-c", "512",
           "--kv-disk", str(folder)]
    r = subprocess.run(cmd + ["-m", str(stories)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    mine = records(folder)
    assert mine
    other = subprocess.run(cmd + ["-m", str(need(SMOLLM))], capture_output=True, text=True,
                           timeout=300)
    assert other.returncode == 0, other.stderr
    assert "(0 from the disk cache)" in other.stderr
    assert all(f.exists() for f in mine)
    # The same model under another K/V type is another identity too.
    again = subprocess.run(cmd + ["-m", str(stories), "--kv-type", "q8_0"], capture_output=True,
                           text=True, timeout=120)
    assert "(0 from the disk cache)" in again.stderr


def test_kv_disk_gb_needs_kv_disk(pagoda_bin, stories):
    r = subprocess.run([str(pagoda_bin), "run", "-m", str(stories), "-p", "Hi", "--kv-disk-gb",
                        "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--kv-disk-gb goes with --kv-disk" in r.stderr


def test_killed_mid_write_then_restarted(pagoda_bin, stories, tmp_path):
    """SIGKILL while blocks are queued or being written: the restart deletes what is half
    written (temporary names), keeps whole records, and answers as a fresh computation."""
    folder = tmp_path / "kv"
    want = served_from_scratch(pagoda_bin, stories, "f16", (PROMPT, OTHER))
    s = serve(pagoda_bin, stories, folder)
    try:
        check_same(complete(s), want[0])
        check_same(complete(s, OTHER), want[1])
    finally:
        s.stop()  # SIGKILL
    (next(pathlib.Path(folder).glob("*/")) / "0123-4567.kvb.tmp").write_bytes(b"half a record")
    s = serve(pagoda_bin, stories, folder)
    try:
        check_same(complete(s), want[0])
        check_same(complete(s, OTHER), want[1])
        assert stats(s)["corrupt_records"] <= 1  # only the leftover, if anything
    finally:
        s.stop()
    assert not list(pathlib.Path(folder).glob("*/*.tmp"))


def test_concurrent_requests_after_a_restart(pagoda_bin, stories, tmp_path):
    """Several prompts sharing a prefix, sent together to a restarted server: each answer is
    the fresh computation's, some of their blocks from the disk."""
    from concurrent.futures import ThreadPoolExecutor
    folder = tmp_path / "kv"
    prompts = [PROMPT, PROMPT + " named Sam.", PROMPT.replace("boy", "dog"), OTHER, OTHER + " Max"]
    want = served_from_scratch(pagoda_bin, stories, "f16", prompts)
    first = serve(pagoda_bin, stories, folder)
    try:
        check_same(complete(first, PROMPT), want[0])
        check_same(complete(first, OTHER), want[3])
        assert first.terminate() == 0
    finally:
        first.stop()
    s = serve(pagoda_bin, stories, folder)
    try:
        with ThreadPoolExecutor(len(prompts)) as pool:
            got = list(pool.map(lambda p: complete(s, p), prompts))
        for g, w in zip(got, want):
            check_same(g, w)
        assert stats(s)["hit_tokens"] > 0
    finally:
        s.stop()


def test_lora_adapters_keep_blocks_of_their_own(pagoda_bin, stories, tmp_path):
    """run --lora: the adapter (its digest and scale) is part of the folder's identity; serve
    --lora: a request's adapter is in its prefix digests, and a restart serves it exactly."""
    from test_lora import random_pairs, write_adapter
    adapter = tmp_path / "adapter.gguf"
    write_adapter(adapter, "llama", random_pairs(stories, 4, seed=3), 4.0)
    folder = tmp_path / "kv"

    def run(*extra):
        r = subprocess.run([str(pagoda_bin), "run", "-m", str(stories), "-p", PROMPT, "-n", "8",
                            "--temp", "0", "-t", "2", "-c", "512", "--kv-disk", str(folder),
                            *map(str, extra)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        import re
        return r.stdout, int(re.search(r"\((\d+) from the disk cache\)", r.stderr).group(1))

    plain, n = run()
    assert n == 0
    with_adapter, n = run("--lora", adapter)
    assert n == 0 and with_adapter != plain
    again, n = run("--lora", adapter)
    assert n > 0 and again == with_adapter
    assert run("--lora", adapter, "--lora-scale", "0.5")[1] == 0
    assert run()[1] > 0

    served = ("--lora", f"ad={adapter}")
    want = served_from_scratch(pagoda_bin, stories, "f16")  # warms nothing: the base's answer
    fresh = serve(pagoda_bin, stories, None, *served)
    try:
        want_ad = complete(fresh, model="ad")
    finally:
        fresh.stop()
    folder = tmp_path / "served"
    first = serve(pagoda_bin, stories, folder, *served)
    try:
        check_same(complete(first, model="ad"), want_ad)
        assert first.terminate() == 0
    finally:
        first.stop()
    second = serve(pagoda_bin, stories, folder, *served)
    try:
        check_same(complete(second), want[0])  # the base: none of the adapter's blocks
        assert stats(second)["hit_tokens"] == 0
        check_same(complete(second, model="ad"), want_ad)
        assert stats(second)["hit_tokens"] > 0
    finally:
        second.stop()
