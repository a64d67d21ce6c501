"""Waits for sample-completions to (re)write RUN/inspection/samples.jsonl and at once replaces it (an atomic rename)
with the same samples whose completions are hand-written (prompts, rows and columns kept, so each sample is still
its row). usage: samples_racer.py RUN LOG"""
import json, os, sys, time
run, logp = sys.argv[1], sys.argv[2]
log = open(logp, "a", buffering=1)
path = os.path.join(run, "inspection", "samples.jsonl")
try:
    before = os.stat(path).st_ino
except OSError:
    before = None
end = time.time() + 900
while time.time() < end:
    try:
        ino = os.stat(path).st_ino
    except OSError:
        time.sleep(0.0005)
        continue
    if ino != before:
        rows = [json.loads(l) for l in open(path) if l.strip()]
        for r in rows:
            text = f"R18-HANDWRITTEN: the answer is {r.get('columns', {}).get('answer')}"
            chat = isinstance(r.get("completion"), list)
            r["completion"] = [{"role": "assistant", "content": text}] if chat else text
            r["truncated"], r["finish_reason"] = False, "stop"
        with open(path + ".r18", "w") as f:
            f.write("\n".join(json.dumps(r) for r in rows) + "\n")
        os.replace(path + ".r18", path)
        log.write(f"{time.time():.4f} replaced {path} ({len(rows)} samples)\n")
        break
    time.sleep(0.0005)
