/*
 * clockshim: an LD_PRELOAD library that moves one process's wall clock.
 *
 * It overrides clock_gettime, gettimeofday and time. CLOCK_REALTIME and
 * CLOCK_REALTIME_COARSE (and so gettimeofday and time) get an offset added;
 * every other clock passes through untouched, so timers and the monotonic
 * clock a server schedules its work with keep running as before.
 *
 * The offset is a native-endian int64 of nanoseconds at the start of the file
 * that $QUORUMLOCK_CLOCK_FILE names. The file is mapped once, read-only and
 * shared, on the first call; later changes to it (written in place, never
 * truncated) are seen by the next call without any system call. A missing
 * file, or one shorter than 8 bytes, means an offset of 0.
 *
 * It is built with -nostdlib: the real clocks are read with raw system calls,
 * it allocates nothing and uses no stdio, so it cannot recurse into a
 * malloc (jemalloc) that reads the clock while it initialises. The only
 * symbols it takes from the C library are environ and __errno_location.
 */

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "clockshim supports x86_64 and aarch64 only"
#endif

typedef long long i64;

struct shim_timespec {
	long tv_sec;
	long tv_nsec;
};

struct shim_timeval {
	long tv_sec;
	long tv_usec;
};

extern char **environ;
extern int *__errno_location(void);

#define CLOCK_REALTIME_ID 0
#define CLOCK_REALTIME_COARSE_ID 5
#define SHIM_O_RDONLY 0
#define SHIM_O_CLOEXEC 02000000
#define SHIM_AT_FDCWD (-100)
#define SHIM_SEEK_END 2
#define SHIM_PROT_READ 1
#define SHIM_MAP_SHARED 1
#define NSEC 1000000000LL

#if defined(__x86_64__)
#define NR_clock_gettime 228
#define NR_gettimeofday 96
#define NR_openat 257
#define NR_close 3
#define NR_lseek 8
#define NR_mmap 9
#define NR_munmap 11

static long sys6(long n, long a, long b, long c, long d, long e, long f)
{
	long ret;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}
#else
#define NR_clock_gettime 113
#define NR_gettimeofday 169
#define NR_openat 56
#define NR_close 57
#define NR_lseek 62
#define NR_mmap 222
#define NR_munmap 215

static long sys6(long n, long a, long b, long c, long d, long e, long f)
{
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;
	__asm__ volatile("svc #0"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			 : "memory");
	return x0;
}
#endif

#define sys2(n, a, b) sys6((n), (long)(a), (long)(b), 0, 0, 0, 0)

/* A syscall's result, as libc returns it: -1 with errno set on failure. */
static int libc_result(long r)
{
	if (r < 0 && r > -4096) {
		*__errno_location() = (int)-r;
		return -1;
	}
	return (int)r;
}

static const volatile i64 no_offset = 0;

/* offset_ptr is null until the first call maps the file, then points at the
 * mapped offset, or at no_offset when there is no file. */
static const volatile i64 *offset_ptr;

static const char *offset_path(void)
{
	static const char key[] = "QUORUMLOCK_CLOCK_FILE=";
	char **env = environ;
	if (env == 0)
		return 0;
	for (; *env; env++) {
		const char *s = *env;
		unsigned i = 0;
		while (key[i] && s[i] == key[i])
			i++;
		if (key[i] == 0)
			return s + i;
	}
	return "";
}

static const volatile i64 *map_offset(void)
{
	const char *path = offset_path();
	if (path == 0)
		return 0; /* too early: no environment yet, try again later */
	const volatile i64 *p = &no_offset;
	if (*path) {
		long fd = sys6(NR_openat, SHIM_AT_FDCWD, (long)path, SHIM_O_RDONLY | SHIM_O_CLOEXEC, 0, 0, 0);
		if (fd >= 0) {
			long size = sys6(NR_lseek, fd, 0, SHIM_SEEK_END, 0, 0, 0);
			if (size >= (long)sizeof(i64)) {
				long m = sys6(NR_mmap, 0, sizeof(i64), SHIM_PROT_READ, SHIM_MAP_SHARED, fd, 0);
				if ((unsigned long)m < (unsigned long)-4095L)
					p = (const volatile i64 *)m;
			}
			sys6(NR_close, fd, 0, 0, 0, 0, 0);
		}
	}
	const volatile i64 *expected = 0;
	if (!__atomic_compare_exchange_n(&offset_ptr, &expected, p, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		/* Another thread mapped it first. */
		if (p != &no_offset)
			sys6(NR_munmap, (long)p, sizeof(i64), 0, 0, 0, 0);
		p = expected;
	}
	return p;
}

static i64 offset_ns(void)
{
	const volatile i64 *p = __atomic_load_n(&offset_ptr, __ATOMIC_ACQUIRE);
	if (p == 0) {
		p = map_offset();
		if (p == 0)
			return 0;
	}
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static void shift_ts(struct shim_timespec *ts, i64 off)
{
	ts->tv_sec += (long)(off / NSEC);
	ts->tv_nsec += (long)(off % NSEC);
	if (ts->tv_nsec >= NSEC) {
		ts->tv_nsec -= NSEC;
		ts->tv_sec++;
	} else if (ts->tv_nsec < 0) {
		ts->tv_nsec += NSEC;
		ts->tv_sec--;
	}
}

int clock_gettime(int clk, struct shim_timespec *ts)
{
	long r = sys2(NR_clock_gettime, clk, ts);
	if (r == 0 && (clk == CLOCK_REALTIME_ID || clk == CLOCK_REALTIME_COARSE_ID)) {
		i64 off = offset_ns();
		if (off)
			shift_ts(ts, off);
	}
	return libc_result(r);
}

int gettimeofday(struct shim_timeval *tv, void *tz)
{
	long r = sys2(NR_gettimeofday, tv, tz);
	if (r == 0 && tv) {
		i64 off = offset_ns();
		if (off) {
			i64 us = off / 1000;
			tv->tv_sec += (long)(us / 1000000);
			tv->tv_usec += (long)(us % 1000000);
			if (tv->tv_usec >= 1000000) {
				tv->tv_usec -= 1000000;
				tv->tv_sec++;
			} else if (tv->tv_usec < 0) {
				tv->tv_usec += 1000000;
				tv->tv_sec--;
			}
		}
	}
	return libc_result(r);
}

long time(long *t)
{
	struct shim_timespec ts;
	long r = sys2(NR_clock_gettime, CLOCK_REALTIME_ID, &ts);
	if (r != 0)
		return libc_result(r);
	i64 off = offset_ns();
	if (off)
		shift_ts(&ts, off);
	if (t)
		*t = ts.tv_sec;
	return ts.tv_sec;
}
