# shellcheck shell=bash
# The Go toolchain's settings for every build from source here (build.sh, build_node.sh source this file).
# No DWARF from the compiler: every binary is linked with -s -w, which drops it anyway. A cold etcd build here took
# 63.9 and 63.0 CPU s with -dwarf=false against 69.9 and 69.7 without (two interleaved pairs, 2026-12-07), and 65.9
# against 72.3 in `make bench-gobuild` (bench/gobuild/results.md): about 9% of a cold run's ~1700 compiler CPU s.
export GOFLAGS="-mod=mod -gcflags=all=-dwarf=false" GOWORK=off
# The compiler's and the linker's own garbage collector off, under a soft heap limit per process: a cold build is
# CPU-bound on CI's 2 cores, and Go's compiler spends a fifth to a quarter of its CPU collecting garbage. Measured
# on this machine with empty build caches (2026-12-06, user + sys): etcd 62.5 CPU s against 78.7 and 86.2 at the
# default GOGC=100; kube-apiserver 307 s against 419 s (wall 199 s against 228 s), its largest process (the link)
# 2.0 GB against 1.8 GB; `make bench-gobuild` measures it again (bench/gobuild/). DTR_GOGC=100 restores the default.
export GOGC=${DTR_GOGC:-off} GOMEMLIMIT=${DTR_GOMEMLIMIT:-3GiB}
