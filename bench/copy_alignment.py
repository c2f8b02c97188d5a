"""copy_file_range of the same bytes between equal vs different page offsets
(explains the best-case gap in results_pt2.md). Run from bench/out/ after
bench/pt2_convert.py has built the archive."""
import os, time, subprocess, statistics
src = "stack_1.6gb.pt2"; n = os.path.getsize(src) - 8192
def run(src_off, dst_shift):
    subprocess.run(["sync"])
    fi = os.open(src, os.O_RDONLY); fo = os.open("t.out", os.O_WRONLY|os.O_CREAT|os.O_TRUNC)
    if dst_shift: os.write(fo, b"x"*dst_shift)
    t=time.perf_counter(); off = 0
    while off < n:
        off += os.copy_file_range(fi, fo, min(268<<20, n-off), src_off + off)
    os.close(fo); os.close(fi); dt=time.perf_counter()-t; os.remove("t.out"); return dt
res = {"matched": [], "mismatched": []}
for k in range(7):
    res["matched"].append(run(0, 0)); res["mismatched"].append(run(64, 100))
for k, v in res.items(): print(k, "median %.3f min %.3f" % (statistics.median(v), min(v)), [round(x,2) for x in v])
