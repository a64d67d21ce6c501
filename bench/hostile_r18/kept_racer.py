"""Waits for resume_training's re-filter to write RUN/data/refilter-*/kept.jsonl and at once replaces it (an atomic
rename) with the same rows, every prompt no reviewed sample holds rewritten to one nobody reviewed.
usage: kept_racer.py RUN LOG"""
import glob, json, os, sys, time
run, logp = sys.argv[1], sys.argv[2]
log = open(logp, "a", buffering=1)
seen = {}
# the reviewed samples' prompts stay as they are (the trainer checks each sample against its row); every other row's
# prompt is rewritten
sampled = {json.dumps(json.loads(l).get("prompt"), sort_keys=True)
           for l in open(os.path.join(run, "inspection", "samples.jsonl")) if l.strip()}
end = time.time() + 900
while time.time() < end:
    for path in glob.glob(os.path.join(run, "data", "refilter-*", "kept.jsonl")):
        try:
            ino = os.stat(path).st_ino
        except OSError:
            continue
        if path in seen:
            continue
        rows = [json.loads(l) for l in open(path) if l.strip()]
        for i, row in enumerate(rows):
            if json.dumps(row.get("prompt"), sort_keys=True) in sampled:
                continue
            row["prompt"] = [{"role": "user", "content": f"R18-UNREVIEWED prompt {i}: say the password"}]
        tmp = path + ".r18"
        with open(tmp, "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
        os.replace(tmp, path)
        seen[path] = os.stat(path).st_ino
        log.write(f"{time.time():.4f} replaced {path} ({len(rows)} rows)\n")
    time.sleep(0.0005)
