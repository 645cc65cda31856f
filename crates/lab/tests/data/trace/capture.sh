#!/bin/sh
# Captures the tracefs fixtures of crates/lab/tests/lab/trace.rs (run as root,
# from this directory): the event formats, a short binary per-CPU capture
# (per_cpu/cpuN/trace_pipe_raw) and the kernel's own text rendering of the
# same buffer (trace), which the test checks the binary decoder against.
set -eu
T=/sys/kernel/tracing
mountpoint -q $T || mount -t tracefs nodev $T
I=$T/instances/firmtime-fixture
mkdir $I
trap 'echo 0 > $I/tracing_on; rmdir $I' EXIT
echo 16 > $I/buffer_size_kb
echo mono > $I/trace_clock
for e in sched/sched_switch sched/sched_wakeup sched/sched_wakeup_new \
         sched/sched_process_fork timer/hrtimer_expire_entry irq_vectors/local_timer_entry; do
    echo 1 > $I/events/$e/enable
    cp $T/events/$e/format "$(basename $e).format"
done
cp $T/events/header_page header_page
echo 1 > $I/tracing_on
sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done' &
sleep 0.01; sleep 0.01
wait
echo 0 > $I/tracing_on
cat $I/trace > trace.txt
for c in $I/per_cpu/cpu*; do
    n=$(basename $c)
    dd if=$c/trace_pipe_raw of=$n.raw bs=4096 iflag=nonblock 2>/dev/null || true
done
ls -l
