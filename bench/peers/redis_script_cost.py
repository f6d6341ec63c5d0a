#!/usr/bin/env python3
"""Server instructions per call of the Redis queue store's main scripts.

Starts its own redis-server under callgrind (127.0.0.1, a free port, a
temporary directory; stopped by SHUTDOWN NOSAVE, then its PID), loads the
insert, lease and completion scripts as src/backends/redis/queue_scripts.cc
assembles them (from src/backends/redis/queue_scripts*.cc, where each group
of scripts has its file), replays each one N times through `redis-cli
--pipe` with the arguments the store sends, and prints the instructions per
call of each phase (callgrind_control zeroes and dumps the counters around
it).
Instruction counts do not move with the machine's load, unlike times.

  bench/peers/redis_script_cost.py [--source FILE]... [--calls N] [--batch B]

--source: a file to take the scripts from, repeated for each one, or a
glob (quoted) of several (default: this tree's
src/backends/redis/queue_scripts*.cc); their texts are read as one. E.g.
edited copies, to try a change before building anything, or a revision's
single queue_scripts.cc from before the scripts were split into groups
(--source <(git show 546b1b6:src/backends/redis/queue_scripts.cc)).
--batch B: also insert, lease and complete B jobs per call (per-job cost
is the figure divided by B). Needs valgrind, redis-server and redis-cli.
"""
import argparse, glob, os, re, shutil, socket, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument('--source', action='append')
ap.add_argument('--calls', type=int, default=500)
ap.add_argument('--batch', type=int, default=0)
a = ap.parse_args()

sources = []
for pattern in a.source or [os.path.join(HERE, '../../src/backends/redis/queue_scripts*.cc')]:
    matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
    if not matches:
        sys.exit('--source %s: no such file' % pattern)
    sources += matches
src = '\n'.join(open(path).read() for path in sources)
def lit(name):
    return re.search(r'const char\* const ' + name + r' = R"lua\((.*?)\)lua";', src, re.S).group(1)
withlib = re.search(r'std::string WithLib\(const std::string& body\) \{(.*?)\n\}', src, re.S).group(1)
tail = re.search(r'lua \+= R"lua\((.*?)\)lua";\n  return lua;', withlib, re.S).group(1)
max_history = int(re.search(r'kMaxHistory = (\d+)',
                            open(os.path.join(HERE, '../../include/jobpact/queue_backend.h')).read()).group(1))
def script(body):
    return ('local MAXH = %d\nlocal PROMOTE = 10000\n' % max_history) + lit('kLib') + \
        'local function main()\n' + body + tail

with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    port = str(s.getsockname()[1])
work = tempfile.mkdtemp(prefix='jobpact-script-cost.')
out = os.path.join(work, 'cg.out')
server = subprocess.Popen(['valgrind', '--tool=callgrind', '--callgrind-out-file=' + out,
                           'redis-server', '--port', port, '--bind', '127.0.0.1', '--save', '',
                           '--appendonly', 'no', '--dir', work],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def cli(*args, inp=None):
    return subprocess.run(['redis-cli', '-p', port] + list(args), input=inp,
                          capture_output=True, text=True).stdout.strip()
try:
    for _ in range(300):
        if cli('ping') == 'PONG':
            break
        time.sleep(0.1)
    else:
        sys.exit('redis-server under callgrind did not start')
    sha = {k: cli('script', 'load', script(v)) for k, v in {
        'insert': lit('kInsert'), 'write': lit('kWrite') + lit('kWriteOne'),
        'lease': lit('kLease'), 'many': lit('kWrite') + lit('kWriteMany')}.items()}

    def resp(args):
        return '*%d\r\n' % len(args) + ''.join('$%d\r\n%s\r\n' % (len(x.encode()), x) for x in args)

    def measure(name, cmds, per=1):
        subprocess.run(['callgrind_control', '-z', str(server.pid)], capture_output=True)
        r = subprocess.run(['redis-cli', '-p', port, '--pipe'], input=''.join(map(resp, cmds)),
                           capture_output=True, text=True)
        subprocess.run(['callgrind_control', '-d', str(server.pid)], capture_output=True)
        dump = max(glob.glob(out + '.*'), key=os.path.getmtime)
        total = subprocess.run(['callgrind_annotate', dump], capture_output=True, text=True).stdout
        ir = int(re.search(r'([\d,]+) \(100.0%\)\s+PROGRAM TOTALS', total).group(1).replace(',', ''))
        errors = re.search(r'errors: (\d+)', r.stdout)
        print('%-34s %9d instructions per call%s  (%d calls, %s errors)' % (
            name, ir // len(cmds), '' if per == 1 else ', %d per job' % (ir // len(cmds) // per),
            len(cmds), errors.group(1) if errors else '?'))

    T0 = 1796594916000000000
    env = ('{"job_id":"%s","job_type":"bench.job","payload":{"i":1},"attempt":0,"max_attempts":5,'
           '"created_at":"2026-12-06T22:00:00Z","timeout_seconds":30,'
           '"visibility_timeout_seconds":45,"queue":"default","priority":0}')
    n = max(a.calls, a.batch)
    ids = ['job_%026d' % i for i in range(n * (2 if a.batch else 1))]
    score = str(1000 * 2**42 + T0 // 1000000)

    def insert_args(i):  # One job's 19 values (InsertJobs), ready at once, no tenant.
        t = str(T0 + i)
        return [ids[i], '', env % ids[i], 'default', 'bench.job', '45000000000', t, 'queued', '0', t,
                '0', '19:%s19:%s0:1:51:01:01:00:0:0:0:0:1:00:' % (t, t), 'ready:default|bench.job',
                t[-6:] + ids[i], score, score,
                '{"from":"queued","to":"queued","at_ns":%s,"reason":"enqueued"}' % t, '', '0']

    def done_args(i, token):  # One completion (the write script's ARGV).
        t = str(T0 + 10**9 + i)
        return [ids[i], 'running', '1', token, '', 'succeeded', '1', t, t, '1', '', '', '0', '[]',
                '0', '19:%s19:%s19:%s1:51:01:01:00:0:0:9:succeeded0:1:00:' % (t, t, t),
                'finished', t[-6:] + ids[i], t[:-6], '',
                '{"from":"running","to":"succeeded","at_ns":%s,"reason":"succeeded"}' % t, '0', '']

    ns = 'jobpact:{cost}:'
    head = lambda s: ['EVALSHA', sha[s], '1', ns]
    now = str(T0 + 10**9)
    lease = lambda m: head('lease') + [now, str(m), 'w', '"w"', '"delivered"', '', '']
    # Lease tokens are "w#<n>", n counting up from 1 in the namespace.
    calls = a.calls
    measure('insert, 1 job', [head('insert') + [str(T0 - 300 * 10**9), '1'] + insert_args(i)
                              for i in range(calls)])
    measure('lease, 1 job', [lease(1)] * calls)
    measure('completion, 1 job', [head('write') + done_args(i, 'w#%d' % (i + 1)) for i in range(calls)])
    measure('lease, nothing ready', [lease(1)] * calls)
    if a.batch:
        b, c = a.batch, max(1, calls // a.batch)
        base = calls
        measure('insert, %d jobs' % b, [head('insert') + [str(T0 - 300 * 10**9), str(b)] +
                                        sum((insert_args(base + k * b + j) for j in range(b)), [])
                                        for k in range(c)], b)
        measure('lease, %d jobs' % b, [lease(b)] * c, b)
        many = []
        for k in range(c):
            args = head('many') + [str(b)]
            for j in range(b):
                d = done_args(base + k * b + j, 'w#%d' % (calls + k * b + j + 1))
                args += [str(len(d))] + d
            many.append(args)
        measure('completion, %d jobs in one call' % b, many, b)
    print('final jobs:', cli('zcard', ns + 'finished'), ' still leased:', cli('zcard', ns + 'leases'))
finally:
    cli('shutdown', 'nosave')
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
    shutil.rmtree(work, ignore_errors=True)
