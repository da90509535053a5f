// SPDX-License-Identifier: BSD-3-Clause
package dlock.interop;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RBucket;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.Config;

/**
 * Takes and gives back Redisson locks ({@code RLock}, the read and write
 * locks of {@code RReadWriteLock}) and permits of
 * {@code RPermitExpirableSemaphore} as told on standard input, for the tests
 * that check dlock and Redisson exclude each other on the same names.
 *
 * <pre>
 *   java -jar redisson-driver-all.jar redis://127.0.0.1:PORT [--watchdog MS]
 * </pre>
 *
 * It reads one command a line and answers each with one line on standard
 * output; the first line, once Redisson is connected, is {@code ready T}.
 * T is {@link System#nanoTime()}, CLOCK_MONOTONIC in nanoseconds on Linux,
 * the clock a C caller reads with clock_gettime(CLOCK_MONOTONIC). A command
 * that fails answers {@code error MESSAGE}. The commands are in
 * {@link #COMMANDS}.
 *
 * <p>Every command runs on the main thread, one after the other: a Redisson
 * lock belongs to a thread, so every lock and unlock of this process is the
 * same holder, the hash field {@code <id>:<thread>} that the command
 * {@code id} prints (a write lock's field adds {@code :write}). A blocking
 * command ({@code lock}, {@code rlock}, {@code wlock}, {@code semacquire})
 * answers only when it is done; the caller waits for that answer before it
 * sends another command. A second holder is a second process. Locks are
 * taken without a lease time, so Redisson's watchdog renews them
 * ({@code --watchdog}: Redisson's lockWatchdogTimeout, 30000 ms by default).
 * A semaphore permit belongs to no thread: it has an id, which its release
 * names, and the lease it was taken with (no watchdog renews it).
 */
public final class RedissonDriver {
    /** One command: its arguments after the name; returns the answer line. */
    @FunctionalInterface
    private interface Command {
        String run(RedissonDriver d, String[] args) throws Exception;
    }

    private static final class Spec {
        final String usage;
        final int minArgs;
        final int maxArgs;
        final Command command;

        Spec(String usage, int minArgs, int maxArgs, Command command) {
            this.usage = usage;
            this.minArgs = minArgs;
            this.maxArgs = maxArgs;
            this.command = command;
        }
    }

    /** The commands, by name; a new one is one more entry. */
    private static final Map<String, Spec> COMMANDS = new LinkedHashMap<>();

    private static void command(String name, String usage, int minArgs, int maxArgs, Command c) {
        COMMANDS.put(name, new Spec(usage, minArgs, maxArgs, c));
    }

    static {
        command("ping", "ping: ok T", 0, 0, (d, a) -> "ok " + System.nanoTime());
        command("id", "id: ok FIELD (the hash field of this process's holds)", 0, 0,
                (d, a) -> "ok " + d.client.getId() + ":" + Thread.currentThread().getId());
        command("trylock",
                "trylock NAME WAIT_MS [LEASE_MS]: ok T | busy T (no lease: the watchdog renews)",
                2, 3, (d, a) -> {
                    RLock l = d.client.getLock(a[0]);
                    long waitMs = parseMs(a[1]);
                    boolean got = a.length > 2
                                          ? l.tryLock(waitMs, parseMs(a[2]), TimeUnit.MILLISECONDS)
                                          : l.tryLock(waitMs, TimeUnit.MILLISECONDS);
                    long t = System.nanoTime();
                    return (got ? "ok " : "busy ") + t;
                });
        command("lock", "lock NAME: ok T once held (blocks until then)", 1, 1, (d, a) -> {
            d.client.getLock(a[0]).lock();
            return "ok " + System.nanoTime();
        });
        command("unlock", "unlock NAME: ok T, T read just before unlock() is called", 1, 1,
                (d, a) -> {
                    RLock l = d.client.getLock(a[0]);
                    long t = System.nanoTime();
                    l.unlock();
                    return "ok " + t;
                });
        command("holds", "holds NAME: ok N (this thread's hold count)", 1, 1,
                (d, a) -> "ok " + d.client.getLock(a[0]).getHoldCount());
        command("held", "held NAME: ok 1 | ok 0 (held by anyone)", 1, 1,
                (d, a) -> "ok " + (d.client.getLock(a[0]).isLocked() ? 1 : 0));
        command("mine", "mine NAME: ok 1 | ok 0 (held by this thread)", 1, 1,
                (d, a) -> "ok " + (d.client.getLock(a[0]).isHeldByCurrentThread() ? 1 : 0));
        command("count", "count NAME KEY N: ok N (N times: lock, GET KEY, SET KEY +1, unlock)",
                3, 3, (d, a) -> {
                    long n = parseCount(a[2]);
                    for (long i = 0; i < n; i++)
                        d.increment(a[0], a[1]);
                    return "ok " + n;
                });
        command("countfor",
                "countfor NAME KEY MS: ok N (increments as in count, started for MS ms)", 3, 3,
                (d, a) -> {
                    long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(parseMs(a[2]));
                    long n = 0;
                    while (System.nanoTime() - end < 0) {
                        d.increment(a[0], a[1]);
                        n++;
                    }
                    return "ok " + n;
                });
        // RReadWriteLock: its read and write locks, taken as the RLock
        // commands take theirs (no lease: the watchdog renews).
        command("rlock", "rlock NAME: ok T once the read lock is held (blocks until then)", 1, 1,
                (d, a) -> lock(d.readLock(a[0])));
        command("tryrlock", "tryrlock NAME WAIT_MS: ok T | busy T (read lock, tryLock)", 2, 2,
                (d, a) -> tryLock(d.readLock(a[0]), parseMs(a[1])));
        command("runlock", "runlock NAME: ok T, T read just before the read lock's unlock()", 1,
                1, (d, a) -> unlock(d.readLock(a[0])));
        command("wlock", "wlock NAME: ok T once the write lock is held (blocks until then)", 1, 1,
                (d, a) -> lock(d.writeLock(a[0])));
        command("trywlock", "trywlock NAME WAIT_MS: ok T | busy T (write lock, tryLock)", 2, 2,
                (d, a) -> tryLock(d.writeLock(a[0]), parseMs(a[1])));
        command("wunlock", "wunlock NAME: ok T, T read just before the write lock's unlock()", 1,
                1, (d, a) -> unlock(d.writeLock(a[0])));
        // RPermitExpirableSemaphore: one permit at a time, each with a lease.
        command("semset", "semset NAME N: ok 1 | ok 0 (trySetPermits(N): set, or already set)",
                2, 2, (d, a) -> "ok " + (d.semaphore(a[0]).trySetPermits(parseCount32(a[1]))
                                                 ? 1 : 0));
        command("semtry",
                "semtry NAME WAIT_MS LEASE_MS: ok T ID | busy T (tryAcquire(wait, lease))", 3, 3,
                (d, a) -> {
                    String id = d.semaphore(a[0]).tryAcquire(parseMs(a[1]), parseMs(a[2]),
                                                             TimeUnit.MILLISECONDS);
                    long t = System.nanoTime();
                    return id != null ? "ok " + t + " " + id : "busy " + t;
                });
        command("semacquire",
                "semacquire NAME LEASE_MS: ok T ID once a permit is taken (acquire(lease), blocks)",
                2, 2, (d, a) -> {
                    String id = d.semaphore(a[0]).acquire(parseMs(a[1]), TimeUnit.MILLISECONDS);
                    return "ok " + System.nanoTime() + " " + id;
                });
        command("semrelease", "semrelease NAME ID: ok T, T read just before release(ID)", 2, 2,
                (d, a) -> {
                    RPermitExpirableSemaphore s = d.semaphore(a[0]);
                    long t = System.nanoTime();
                    s.release(a[1]);
                    return "ok " + t;
                });
        command("semavail", "semavail NAME: ok N (availablePermits())", 1, 1,
                (d, a) -> "ok " + d.semaphore(a[0]).availablePermits());
        command("help", "help: ok COMMANDS", 0, 0, (d, a) -> "ok " + String.join(", ",
                COMMANDS.values().stream().map(s -> s.usage).toArray(String[]::new)));
        command("quit", "quit: ok, then exits", 0, 0, (d, a) -> {
            d.quit = true;
            return "ok";
        });
    }

    private final RedissonClient client;
    private boolean quit;

    private RedissonDriver(RedissonClient client) {
        this.client = client;
    }

    private static long parseMs(String s) {
        long v = Long.parseLong(s);
        if (v < 0)
            throw new IllegalArgumentException("negative milliseconds: " + s);
        return v;
    }

    private static int parseCount32(String s) {
        int v = Integer.parseInt(s);
        if (v < 0)
            throw new IllegalArgumentException("negative count: " + s);
        return v;
    }

    private RLock readLock(String name) {
        return client.getReadWriteLock(name).readLock();
    }

    private RLock writeLock(String name) {
        return client.getReadWriteLock(name).writeLock();
    }

    private RPermitExpirableSemaphore semaphore(String name) {
        return client.getPermitExpirableSemaphore(name);
    }

    private static String lock(RLock l) {
        l.lock();
        return "ok " + System.nanoTime();
    }

    private static String tryLock(RLock l, long waitMs) throws InterruptedException {
        boolean got = l.tryLock(waitMs, TimeUnit.MILLISECONDS);
        long t = System.nanoTime();
        return (got ? "ok " : "busy ") + t;
    }

    private static String unlock(RLock l) {
        long t = System.nanoTime();
        l.unlock();
        return "ok " + t;
    }

    private static long parseCount(String s) {
        long v = Long.parseLong(s);
        if (v < 0)
            throw new IllegalArgumentException("negative count: " + s);
        return v;
    }

    /** One increment of KEY under NAME, its read and write apart on purpose. */
    private void increment(String name, String key) {
        RLock l = client.getLock(name);
        l.lock();
        try {
            RBucket<String> b = client.getBucket(key, StringCodec.INSTANCE);
            String v = b.get();
            long n = v == null ? 0 : Long.parseLong(v);
            b.set(Long.toString(n + 1));
        } finally {
            l.unlock();
        }
    }

    private String execute(String line) {
        String[] words = line.trim().split("\\s+");
        if (words.length == 0 || words[0].isEmpty())
            return "error empty command";
        Spec spec = COMMANDS.get(words[0]);
        if (spec == null)
            return "error unknown command " + words[0] + " (try help)";
        int nargs = words.length - 1;
        if (nargs < spec.minArgs || nargs > spec.maxArgs)
            return "error usage: " + spec.usage;
        String[] args = new String[nargs];
        System.arraycopy(words, 1, args, 0, nargs);
        try {
            return spec.command.run(this, args);
        } catch (Exception e) {
            e.printStackTrace();
            String msg = e.getClass().getSimpleName() + ": " + e.getMessage();
            // Redisson wraps what its scripts' answers mean (a permit
            // already gone, ...) in a RedisException: say the cause too.
            Throwable root = e;
            while (root.getCause() != null && root.getCause() != root)
                root = root.getCause();
            if (root != e)
                msg += " (" + root.getClass().getSimpleName() + ": " + root.getMessage() + ")";
            return "error " + msg.replaceAll("[\\r\\n]+", " ");
        }
    }

    private static void usage() {
        System.err.println("usage: java -jar redisson-driver-all.jar redis://HOST:PORT "
                           + "[--watchdog MS]");
        System.exit(64);
    }

    public static void main(String[] argv) throws IOException {
        String address = null;
        long watchdogMs = -1;
        for (int i = 0; i < argv.length; i++) {
            if (argv[i].equals("--watchdog") && i + 1 < argv.length)
                watchdogMs = Long.parseLong(argv[++i]);
            else if (address == null && argv[i].startsWith("redis://"))
                address = argv[i];
            else
                usage();
        }
        if (address == null)
            usage();

        Config config = new Config();
        if (watchdogMs > 0)
            config.setLockWatchdogTimeout(watchdogMs);
        // A few connections: one process is one holder, one command at a time.
        config.setThreads(2);
        config.setNettyThreads(4);
        config.useSingleServer()
                .setAddress(address)
                .setConnectionMinimumIdleSize(2)
                .setConnectionPoolSize(8)
                .setSubscriptionConnectionMinimumIdleSize(1)
                .setSubscriptionConnectionPoolSize(4);

        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), false,
                                          StandardCharsets.UTF_8);
        RedissonClient client;
        try {
            client = Redisson.create(config);
        } catch (Exception e) {
            e.printStackTrace();
            out.println("error cannot connect to " + address + ": "
                        + String.valueOf(e.getMessage()).replaceAll("[\\r\\n]+", " "));
            out.flush();
            System.exit(69);
            return;
        }
        RedissonDriver d = new RedissonDriver(client);
        out.println("ready " + System.nanoTime() + " " + config.getLockWatchdogTimeout());
        out.flush();

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in,
                                                                     StandardCharsets.UTF_8));
        String line;
        while (!d.quit && (line = in.readLine()) != null) {
            out.println(d.execute(line));
            out.flush();
        }
        client.shutdown(0, 5, TimeUnit.SECONDS);
        System.exit(0);
    }
}
