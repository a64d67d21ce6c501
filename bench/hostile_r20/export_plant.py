"""Watch RUN for export's staging folder (.export-*) and plant, once it exists: a symbolic link to a folder
outside the workspace, a dangling link, and a pipe (none is a regular file: refuse_staged_changes' is_file skips)."""
import os, sys, time, glob
run, target = sys.argv[1], sys.argv[2]
end = time.time() + 600
while time.time() < end:
    found = glob.glob(os.path.join(run, ".export-*"))
    if found:
        d = found[0]
        time.sleep(0.05)
        try:
            os.symlink(target, os.path.join(d, "extra_weights"))
            os.symlink("/nonexistent/elsewhere.safetensors", os.path.join(d, "model-00002-of-00002.safetensors"))
            os.mkfifo(os.path.join(d, "added.pipe"))
            print("planted in", d, flush=True)
        except OSError as e:
            print("plant failed", e, flush=True)
        break
    time.sleep(0.01)
