# ruff: noqa
"""An inotify racer on a run's inspection/reward_code/ (ctypes inotify, stdlib only).
  racer.py log DIR NAME SECONDS            print each open/close of DIR/NAME with a timestamp (calibration)
  racer.py swap DIR NAME EVIL K SECONDS    put EVIL's bytes in place of NAME right after the K-th close of NAME
                                           (rename over it), and the original back right after the next close
"""
import ctypes, os, struct, sys, time
libc = ctypes.CDLL("libc.so.6", use_errno=True)
IN_OPEN, IN_CLOSE_NOWRITE, IN_CLOSE_WRITE = 0x20, 0x10, 0x08
mode, d, name = sys.argv[1], sys.argv[2], sys.argv[3]
fd = libc.inotify_init1(0)
wd = libc.inotify_add_watch(fd, d.encode(), IN_OPEN | IN_CLOSE_NOWRITE)
path = os.path.join(d, name)
orig = open(path, "rb").read()
if mode == "swap":
    evil, k, secs = open(sys.argv[4], "rb").read(), int(sys.argv[5]), float(sys.argv[6])
else:
    secs = float(sys.argv[4])
def stage(data, tag):  # written ahead of time (a dot file beside it), so a swap is one rename
    tmp = os.path.join(os.path.dirname(os.path.dirname(d)), f".racer-{tag}.tmp")  # outside reward_code/, same filesystem
    with open(tmp, "wb") as f: f.write(data)
    return tmp
def put(data, tag):
    os.rename(staged.pop(tag) if tag in staged else stage(data, tag), path)
staged = {}
if mode == "swap":
    staged = {"e": stage(evil, "e"), "o": stage(orig, "o")}
t0 = time.time(); closes = 0; state = "orig"
os.set_blocking(fd, True)
import select
while time.time() - t0 < secs:
    r, _, _ = select.select([fd], [], [], 0.5)
    if not r: continue
    buf = os.read(fd, 65536); i = 0
    while i < len(buf):
        _wd, mask, _c, ln = struct.unpack_from("iIII", buf, i); nm = buf[i + 16:i + 16 + ln].rstrip(b"\0").decode(); i += 16 + ln
        if nm != name: continue
        ev = "open" if mask & IN_OPEN else "close"
        if mode == "log":
            print(f"{time.time() - t0:8.3f} {ev}", flush=True); continue
        if ev == "close":
            closes += 1
            if closes == k and state == "orig":
                put(evil, "e"); state = "evil"; print(f"{time.time() - t0:8.3f} close #{closes}: evil in", flush=True)
            elif state == "evil":
                put(orig, "o"); state = "back"; print(f"{time.time() - t0:8.3f} close #{closes}: original back", flush=True)
if state == "evil": put(orig, "o")
for tmp in staged.values():
    os.unlink(tmp)
print(f"racer done: {closes} closes, state {state}", flush=True)
