/*
 * clockshim: an LD_PRELOAD library that moves one process's clocks.
 *
 * It overrides clock_gettime, gettimeofday and time. CLOCK_REALTIME and
 * CLOCK_REALTIME_COARSE (and so gettimeofday and time) get the wall offset
 * added; CLOCK_MONOTONIC, _RAW, _COARSE and CLOCK_BOOTTIME get the monotonic
 * offset added; every other clock passes through untouched.
 *
 * The offsets are native-endian int64s of nanoseconds in the file that
 * $QUORUMLOCK_CLOCK_FILE names: the wall offset at byte 0, the monotonic
 * offset at byte 8 (the bed only ever moves it forward). The file is mapped
 * once, read-only and shared, on the first call; later changes to it
 * (written in place, never truncated) are seen by the next call without any
 * system call. A missing file, or one shorter than 8 bytes, means offsets of
 * 0; a file of 8 to 15 bytes has a monotonic offset of 0.
 *
 * Go programs read the time through the vDSO, not through the C library,
 * so overriding clock_gettime does not reach them. With
 * QUORUMLOCK_CLOCK_VDSO=1 in its environment, the shim's constructor also
 * points the process's auxiliary vector entry AT_SYSINFO_EHDR at a small ELF
 * image of its own that exports __vdso_clock_gettime and
 * __vdso_gettimeofday (version LINUX_2.6; the __kernel_ names of aarch64
 * there) with the offsets above. The C
 * library has read the real vDSO before any constructor runs, so only the Go
 * runtime, which reads the auxiliary vector from the stack when main starts,
 * uses the fake one. The fake makes a system call per reading.
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
#define CLOCK_MONOTONIC_ID 1
#define CLOCK_MONOTONIC_RAW_ID 4
#define CLOCK_MONOTONIC_COARSE_ID 6
#define CLOCK_BOOTTIME_ID 7
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

/* The mapped part of the clock file: the wall offset, then the monotonic one. */
#define MAP_BYTES (2 * sizeof(i64))

static const volatile i64 no_offsets[2];

/* offsets_ptr is null until the first call maps the file, then points at the
 * mapped offsets, or at no_offsets when there is no file. */
static const volatile i64 *offsets_ptr;

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

/* map_offsets maps the file. A file of 8 to 15 bytes reads 0 past its end:
 * the bytes of a mapped page beyond the end of the file are zeros. */
static const volatile i64 *map_offsets(void)
{
	const char *path = offset_path();
	if (path == 0)
		return 0; /* too early: no environment yet, try again later */
	const volatile i64 *p = no_offsets;
	if (*path) {
		long fd = sys6(NR_openat, SHIM_AT_FDCWD, (long)path, SHIM_O_RDONLY | SHIM_O_CLOEXEC, 0, 0, 0);
		if (fd >= 0) {
			long size = sys6(NR_lseek, fd, 0, SHIM_SEEK_END, 0, 0, 0);
			if (size >= (long)sizeof(i64)) {
				long m = sys6(NR_mmap, 0, MAP_BYTES, SHIM_PROT_READ, SHIM_MAP_SHARED, fd, 0);
				if ((unsigned long)m < (unsigned long)-4095L)
					p = (const volatile i64 *)m;
			}
			sys6(NR_close, fd, 0, 0, 0, 0, 0);
		}
	}
	const volatile i64 *expected = 0;
	if (!__atomic_compare_exchange_n(&offsets_ptr, &expected, p, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		/* Another thread mapped it first. */
		if (p != no_offsets)
			sys6(NR_munmap, (long)p, MAP_BYTES, 0, 0, 0, 0);
		p = expected;
	}
	return p;
}

/* offset_ns is the offset of clock clk: the wall offset, the monotonic one,
 * or 0 for a clock the shim does not move. */
static i64 offset_ns(int clk)
{
	int slot;
	switch (clk) {
	case CLOCK_REALTIME_ID:
	case CLOCK_REALTIME_COARSE_ID:
		slot = 0;
		break;
	case CLOCK_MONOTONIC_ID:
	case CLOCK_MONOTONIC_RAW_ID:
	case CLOCK_MONOTONIC_COARSE_ID:
	case CLOCK_BOOTTIME_ID:
		slot = 1;
		break;
	default:
		return 0;
	}
	const volatile i64 *p = __atomic_load_n(&offsets_ptr, __ATOMIC_ACQUIRE);
	if (p == 0) {
		p = map_offsets();
		if (p == 0)
			return 0;
	}
	return __atomic_load_n(&p[slot], __ATOMIC_RELAXED);
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

/* read_clock reads clock clk with its offset, and returns the system call's
 * result: 0, or a negative errno. */
static long read_clock(int clk, struct shim_timespec *ts)
{
	long r = sys2(NR_clock_gettime, clk, ts);
	if (r == 0) {
		i64 off = offset_ns(clk);
		if (off)
			shift_ts(ts, off);
	}
	return r;
}

/* read_timeofday is gettimeofday with the wall offset, returning the system
 * call's result. */
static long read_timeofday(struct shim_timeval *tv, void *tz)
{
	long r = sys2(NR_gettimeofday, tv, tz);
	if (r == 0 && tv) {
		i64 off = offset_ns(CLOCK_REALTIME_ID);
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
	return r;
}

int clock_gettime(int clk, struct shim_timespec *ts)
{
	return libc_result(read_clock(clk, ts));
}

int gettimeofday(struct shim_timeval *tv, void *tz)
{
	return libc_result(read_timeofday(tv, tz));
}

long time(long *t)
{
	struct shim_timespec ts;
	long r = read_clock(CLOCK_REALTIME_ID, &ts);
	if (r != 0)
		return libc_result(r);
	if (t)
		*t = ts.tv_sec;
	return ts.tv_sec;
}

/* ---- the fake vDSO, for Go programs ------------------------------------- */

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long u64;

struct fv_ehdr {
	u8 e_ident[16];
	u16 e_type, e_machine;
	u32 e_version;
	u64 e_entry, e_phoff, e_shoff;
	u32 e_flags;
	u16 e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx;
};

struct fv_phdr {
	u32 p_type, p_flags;
	u64 p_offset, p_vaddr, p_paddr, p_filesz, p_memsz, p_align;
};

struct fv_dyn {
	long d_tag;
	u64 d_val;
};

struct fv_sym {
	u32 st_name;
	u8 st_info, st_other;
	u16 st_shndx;
	u64 st_value, st_size;
};

struct fv_verdef {
	u16 vd_version, vd_flags, vd_ndx, vd_cnt;
	u32 vd_hash, vd_aux, vd_next;
	/* the one auxiliary entry, right after */
	u32 vda_name, vda_next;
};

#define AT_NULL_ID 0
#define AT_PAGESZ_ID 6
#define AT_SYSINFO_EHDR_ID 33
#define FV_PT_LOAD 1
#define FV_PT_DYNAMIC 2
#define FV_DT_NULL 0
#define FV_DT_HASH 4
#define FV_DT_STRTAB 5
#define FV_DT_SYMTAB 6
#define FV_DT_VERSYM 0x6ffffff0L
#define FV_DT_VERDEF 0x6ffffffcL
#define FV_STT_FUNC_GLOBAL 0x12 /* STB_GLOBAL << 4 | STT_FUNC */
#define FV_VER_FLG_BASE 1
#define FV_VERSION_NDX 2

/* The names the Go runtime looks up in the vDSO, per architecture (Go's
 * runtime/vdso_linux_*.go). Only x86_64 is tested. */
#if defined(__x86_64__)
#define FV_VERSION "LINUX_2.6"
#define FV_CLOCK_GETTIME "__vdso_clock_gettime"
#define FV_GETTIMEOFDAY "__vdso_gettimeofday"
#else
#define FV_VERSION "LINUX_2.6.39"
#define FV_CLOCK_GETTIME "__kernel_clock_gettime"
#define FV_GETTIMEOFDAY "__kernel_gettimeofday"
#endif
#define FV_BASE_NAME "clockshim"

/* The string table, and the offsets of its names. */
static const char fv_strings[] = "\0" FV_VERSION "\0" FV_CLOCK_GETTIME "\0" FV_GETTIMEOFDAY "\0" FV_BASE_NAME;
#define FV_STR_VERSION 1
#define FV_STR_CLOCK_GETTIME (FV_STR_VERSION + sizeof(FV_VERSION))
#define FV_STR_GETTIMEOFDAY (FV_STR_CLOCK_GETTIME + sizeof(FV_CLOCK_GETTIME))
#define FV_STR_BASE (FV_STR_GETTIMEOFDAY + sizeof(FV_GETTIMEOFDAY))

/* The image the auxiliary vector points at: an ELF header, a PT_LOAD and a
 * PT_DYNAMIC header, and the dynamic section, symbols, SysV hash table and
 * symbol versions that the Go runtime reads to find the two functions.
 * Addresses in it are offsets from its start (the PT_LOAD has vaddr 0). */
static struct fake_vdso {
	struct fv_ehdr eh;
	struct fv_phdr ph[2];
	struct fv_dyn dyn[6];
	struct fv_sym sym[3];
	u32 hash[2 + 1 + 3]; /* nbucket, nchain, bucket[1], chain[3] */
	u16 versym[3];
	struct fv_verdef ver[2];
	char strings[sizeof(fv_strings)];
} fv __attribute__((aligned(16)));

static long fake_clock_gettime(int clk, struct shim_timespec *ts)
{
	return read_clock(clk, ts);
}

static long fake_gettimeofday(struct shim_timeval *tv, void *tz)
{
	return read_timeofday(tv, tz);
}

/* elf_hash is the SysV ELF hash of a name, as symbol versions record it. */
static u32 elf_hash(const char *s)
{
	u32 h = 0;
	for (; *s; s++) {
		h = (h << 4) + (u8)*s;
		u32 g = h & 0xf0000000u;
		if (g)
			h ^= g >> 24;
		h &= ~g;
	}
	return h;
}

#define FV_OFF(field) ((u64)((char *)&fv.field - (char *)&fv))

static void fv_headers(void)
{
	static const u8 ident[16] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
	for (int i = 0; i < 16; i++)
		fv.eh.e_ident[i] = ident[i];
	fv.eh.e_type = 3; /* ET_DYN */
	fv.eh.e_version = 1;
	fv.eh.e_phoff = FV_OFF(ph);
	fv.eh.e_ehsize = sizeof(fv.eh);
	fv.eh.e_phentsize = sizeof(fv.ph[0]);
	fv.eh.e_phnum = 2;
	fv.ph[0].p_type = FV_PT_LOAD;
	fv.ph[0].p_flags = 5; /* R+X */
	fv.ph[0].p_filesz = fv.ph[0].p_memsz = sizeof(fv);
	fv.ph[0].p_align = 4096;
	fv.ph[1].p_type = FV_PT_DYNAMIC;
	fv.ph[1].p_flags = 4;
	fv.ph[1].p_offset = fv.ph[1].p_vaddr = FV_OFF(dyn);
	fv.ph[1].p_filesz = fv.ph[1].p_memsz = sizeof(fv.dyn);
	fv.ph[1].p_align = 8;
	const struct fv_dyn dyn[6] = {
		{FV_DT_STRTAB, FV_OFF(strings)}, {FV_DT_SYMTAB, FV_OFF(sym)}, {FV_DT_HASH, FV_OFF(hash)},
		{FV_DT_VERSYM, FV_OFF(versym)},  {FV_DT_VERDEF, FV_OFF(ver)}, {FV_DT_NULL, 0},
	};
	for (int i = 0; i < 6; i++)
		fv.dyn[i] = dyn[i];
}

static void fv_symbols(void)
{
	for (unsigned i = 0; i < sizeof(fv_strings); i++)
		fv.strings[i] = fv_strings[i];
	u64 base = (u64)&fv;
	fv.sym[1].st_name = FV_STR_CLOCK_GETTIME;
	fv.sym[1].st_value = (u64)&fake_clock_gettime - base; /* wraps: fine */
	fv.sym[2].st_name = FV_STR_GETTIMEOFDAY;
	fv.sym[2].st_value = (u64)&fake_gettimeofday - base;
	for (int i = 1; i <= 2; i++) {
		fv.sym[i].st_info = FV_STT_FUNC_GLOBAL;
		fv.sym[i].st_shndx = 1;
		fv.versym[i] = FV_VERSION_NDX;
	}
	/* One bucket that chains both symbols: 1 -> 2 -> end. */
	fv.hash[0] = 1;
	fv.hash[1] = 3;
	fv.hash[2] = 1;
	fv.hash[3 + 1] = 2;
	/* The file's own version, then the one Go asks for. */
	u32 aux = (u32)((char *)&fv.ver[0].vda_name - (char *)&fv.ver[0]);
	fv.ver[0] = (struct fv_verdef){1, FV_VER_FLG_BASE, 1, 1, elf_hash(FV_BASE_NAME), aux, sizeof(fv.ver[0]),
				       FV_STR_BASE, 0};
	fv.ver[1] = (struct fv_verdef){1, 0, FV_VERSION_NDX, 1, elf_hash(FV_VERSION), aux, 0, FV_STR_VERSION, 0};
}

static int env_is(char **envp, const char *want)
{
	for (; envp && *envp; envp++) {
		const char *s = *envp;
		unsigned i = 0;
		while (want[i] && s[i] == want[i])
			i++;
		if (want[i] == 0 && s[i] == 0)
			return 1;
	}
	return 0;
}

/* install_fake_vdso runs before main, while environ is still the
 * environment the kernel put on the stack, right before the auxiliary
 * vector. It rewrites AT_SYSINFO_EHDR there in place. */
__attribute__((constructor)) static void install_fake_vdso(void)
{
	char **e = environ;
	if (e == 0 || !env_is(e, "QUORUMLOCK_CLOCK_VDSO=1"))
		return;
	while (*e)
		e++;
	/* Make sure it is the auxiliary vector: it ends within a few dozen
	 * entries and has AT_PAGESZ; else leave the real vDSO in place. */
	u64 *auxv = (u64 *)(e + 1), *ehdr = 0;
	int pagesz = 0, i;
	for (i = 0; i < 128 && auxv[2 * i] != AT_NULL_ID; i++) {
		if (auxv[2 * i] == AT_PAGESZ_ID)
			pagesz = 1;
		else if (auxv[2 * i] == AT_SYSINFO_EHDR_ID)
			ehdr = &auxv[2 * i + 1];
	}
	if (i == 128 || !pagesz || ehdr == 0)
		return;
	fv_headers();
	fv_symbols();
	*ehdr = (u64)&fv;
}
