# ruff: noqa
import os
out = ["me %d ppid %d" % (os.getpid(), os.getppid())]
for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
    try:
        cmd = open(f"/proc/{pid}/cmdline","rb").read().replace(b"\0", b" ")[:120]
    except Exception as e:
        cmd = repr(e)
    try:
        st = {l.split(":")[0]: l.split(":")[1].strip() for l in open(f"/proc/{pid}/status") if l.startswith(("Uid","PPid","NoNewPrivs","Seccomp","CapEff"))}
    except Exception as e:
        st = repr(e)
    fds = []
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try: fds.append(fd + "=" + os.readlink(f"/proc/{pid}/fd/{fd}"))
            except Exception as e: fds.append(fd + "!" + type(e).__name__)
    except Exception as e:
        fds.append("fdERR " + type(e).__name__)
    out.append(f"{pid} {cmd} {st} {fds}")
print("\n".join(out))
