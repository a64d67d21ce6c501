"""Replaces each checkpoint-N/model.safetensors the trainer writes, as soon as the file appears (the trainer keeps
writing into its own open file, which no name reaches any more), with a copy of WEIGHTS (same tensors, other
values). usage: ckpt_racer.py CHECKPOINTS_DIR WEIGHTS LOG"""
import glob, os, shutil, sys, time
ckpts, weights, logp = sys.argv[1:4]
log = open(logp, "a", buffering=1)
done = set()
end = time.time() + 900
while time.time() < end:
    for path in glob.glob(os.path.join(ckpts, "checkpoint-*", "model.safetensors")):
        if path in done:
            continue
        tmp = path + ".r18"
        shutil.copyfile(weights, tmp)
        os.replace(tmp, path)
        done.add(path)
        log.write(f"{time.time():.4f} replaced {path}\n")
    time.sleep(0.0005)
