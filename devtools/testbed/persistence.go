package testbed

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Names of the files Redis (7.0 and later, with its default appendfilename
// and appenddirname) keeps in its data directory.
const (
	rdbFile     = "dump.rdb"
	aofDir      = "appendonlydir"
	aofManifest = "appendonly.aof.manifest"
)

// Snapshot is a copy of a node's data at one moment, taken by
// RedisNode.Snapshot and restored by RedisNode.RestartFromSnapshot. It is a
// file in the bed's temporary directory, removed when the bed closes; it can
// be restored any number of times, on any node of its bed.
type Snapshot struct {
	node string
	path string
}

// Node is the name of the node the snapshot was taken on.
func (s Snapshot) Node() string { return s.node }

// slowAdmin is an admin client for commands that block the server for a
// while (SAVE): only ctx bounds their wait.
func (n *RedisNode) slowAdmin() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: n.DirectAddr(), DialTimeout: 5 * time.Second, ReadTimeout: -1, WriteTimeout: 5 * time.Second,
		MaxRetries: -1, DisableIdentity: true, ContextTimeoutEnabled: true})
}

// Snapshot makes the server write an RDB of its data now (SAVE, through
// the direct connection, so faults in the proxy do not stop it), and keeps
// the file aside. The data directory is left as it was: a later Restart
// with data still reloads what the AOF policy persisted, not the snapshot.
func (n *RedisNode) Snapshot(ctx context.Context) (Snapshot, error) {
	n.dataMu.Lock()
	defer n.dataMu.Unlock()
	fail := func(err error) (Snapshot, error) { return Snapshot{}, fmt.Errorf("%s: snapshot: %w", n.srv.name, err) }
	switch running, paused := n.state(); {
	case !running:
		return fail(errors.New("not running"))
	case paused:
		return fail(errors.New("paused"))
	}
	c := n.slowAdmin()
	defer c.Close()
	sctx, cancel := context.WithTimeout(ctx, n.opts.StartTimeout)
	defer cancel()
	if err := c.Save(sctx).Err(); err != nil {
		return fail(fmt.Errorf("SAVE: %w", err))
	}
	dir := filepath.Join(n.srv.dir, "snapshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	n.snapshots++
	path := filepath.Join(dir, fmt.Sprintf("%d.rdb", n.snapshots))
	// Moved, not copied: a dump.rdb left in the data directory would be
	// loaded by a restart with appendonly no.
	if err := os.Rename(filepath.Join(n.srv.dataDir(), rdbFile), path); err != nil {
		return fail(err)
	}
	return Snapshot{node: n.srv.name, path: path}, nil
}

// RestartFromSnapshot kills the server and starts it again, behind the same
// address, with exactly the data of s: writes made after the snapshot are
// gone, whatever the AOF policy. Once it has loaded the snapshot the server
// persists by the bed's policy again, so a later Restart with data comes
// back with the snapshot and what was written since.
//
// Redis 7 ignores an RDB file while appendonly is yes (it starts empty and
// creates a new AOF), so the server is started with appendonly no, loads
// the RDB, and then has the AOF turned on with CONFIG SET appendonly yes,
// which rewrites the AOF from the loaded data; the call returns when that
// rewrite has finished.
func (n *RedisNode) RestartFromSnapshot(ctx context.Context, s Snapshot) error {
	if s.path == "" {
		return fmt.Errorf("%s: restart from snapshot: an empty Snapshot", n.srv.name)
	}
	n.dataMu.Lock()
	defer n.dataMu.Unlock()
	fail := func(err error) error {
		return fmt.Errorf("%s: restart from snapshot %s: %w", n.srv.name, filepath.Base(s.path), err)
	}
	if _, err := os.Stat(s.path); err != nil {
		return fail(err)
	}
	if err := n.Kill(ctx); err != nil {
		return err
	}
	data := n.srv.dataDir()
	if err := resetDir(data); err != nil {
		return fail(err)
	}
	if err := copyFile(s.path, filepath.Join(data, rdbFile)); err != nil {
		return fail(err)
	}
	if err := n.start(ctx, dataRDB); err != nil {
		return fail(err)
	}
	if n.opts.AppendFsync != FsyncOff {
		if err := n.enableAOF(ctx); err != nil {
			return fail(err)
		}
	}
	// Loaded (a server loading its data answers LOADING, not PONG), and no
	// longer needed: with appendonly no it would be loaded again by a
	// restart, where the policy says a node comes back empty.
	if err := os.Remove(filepath.Join(data, rdbFile)); err != nil {
		return fail(err)
	}
	return nil
}

// enableAOF turns the AOF on in a running server and waits until the
// rewrite that creates it from the data in memory has finished.
func (n *RedisNode) enableAOF(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, n.opts.StartTimeout)
	defer cancel()
	c := n.slowAdmin()
	defer c.Close()
	if err := c.ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
		return fmt.Errorf("CONFIG SET appendonly yes: %w", err)
	}
	return pollInfo(ctx, c, "the AOF rewrite after CONFIG SET appendonly yes", func(info map[string]string) (bool, error) {
		if info["aof_rewrite_in_progress"] != "0" || info["aof_rewrite_scheduled"] != "0" {
			return false, nil
		}
		if st := info["aof_last_bgrewrite_status"]; st != "ok" {
			return false, fmt.Errorf("AOF rewrite failed (aof_last_bgrewrite_status:%s)", st)
		}
		return info["aof_enabled"] == "1", nil
	})
}

// pollInfo reads INFO persistence until done says so, fails, or ctx ends.
func pollInfo(ctx context.Context, c *redis.Client, what string, done func(map[string]string) (bool, error)) error {
	var last error
	for {
		s, err := c.Info(ctx, "persistence").Result()
		if err == nil {
			ok, derr := done(parseInfo(s))
			if derr != nil {
				return derr
			}
			if ok {
				return nil
			}
			last = errors.New("not yet")
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// parseInfo reads the key:value lines of an INFO reply.
func parseInfo(s string) map[string]string {
	m := make(map[string]string)
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// KillLosingTail kills the server with SIGKILL and then cuts the last
// commands commands off its AOF, as if they had been written but never
// reached the disk, which AppendFsync=everysec allows for up to a second or
// two of writes on a power loss. A following Restart with data comes back
// without them. It returns how many commands it cut: fewer than asked when
// the AOF's incremental part holds fewer.
//
// A command here is what a client sent: MULTI ... EXEC (which is also how
// a script that writes more than once is logged) counts as one and is never
// split, and the SELECTs Redis inserts do not count. The cut is always at
// the end of a complete command, so the server starts again without
// complaint. The writes the server had acknowledged are all in the file
// before the kill (it is called once the server's AOF buffer is empty), so
// the count starts from the last acknowledged write.
//
// It needs a bed started with AppendFsync=everysec: with always, no
// acknowledged write can be lost, and with off there is no AOF; either
// error wraps errors.ErrUnsupported.
func (n *RedisNode) KillLosingTail(ctx context.Context, commands int) (int, error) {
	if n.opts.AppendFsync != FsyncEverySec {
		return 0, fmt.Errorf("%s: kill losing the AOF tail: needs AppendFsync=everysec, the bed has %s: %w",
			n.srv.name, n.opts.AppendFsync, errors.ErrUnsupported)
	}
	if commands < 0 {
		return 0, fmt.Errorf("%s: kill losing the AOF tail: %d commands", n.srv.name, commands)
	}
	n.dataMu.Lock()
	defer n.dataMu.Unlock()
	if running, paused := n.state(); running && !paused {
		if err := n.waitAOFWritten(ctx); err != nil {
			return 0, fmt.Errorf("%s: kill losing the AOF tail: %w", n.srv.name, err)
		}
	}
	if err := n.Kill(ctx); err != nil {
		return 0, err
	}
	cut, err := cutAOFTail(filepath.Join(n.srv.dataDir(), aofDir), commands)
	if err != nil {
		return cut, fmt.Errorf("%s: kill losing the AOF tail: %w", n.srv.name, err)
	}
	return cut, nil
}

// waitAOFWritten waits until the server has written its AOF buffer to the
// file. With everysec, a write can wait up to two seconds behind a slow
// background fsync, after the client has had its reply.
func (n *RedisNode) waitAOFWritten(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c := n.Admin()
	defer c.Close()
	return pollInfo(ctx, c, "the AOF buffer to be written", func(info map[string]string) (bool, error) {
		return info["aof_buffer_length"] == "0", nil
	})
}

// incrFiles lists the incremental AOF files of the manifest in dir, oldest
// first.
func incrFiles(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, aofManifest))
	if err != nil {
		return nil, fmt.Errorf("read the AOF manifest (is this Redis 7.0 or later, with appendonly yes?): %w", err)
	}
	type entry struct {
		name string
		seq  int64
	}
	var incr []entry
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsAny(line, `"'`) {
			return nil, fmt.Errorf("AOF manifest line %q: quoted names are not supported", line)
		}
		f := strings.Fields(line)
		if len(f)%2 != 0 {
			return nil, fmt.Errorf("AOF manifest line %q: not key value pairs", line)
		}
		kv := make(map[string]string, len(f)/2)
		for i := 0; i < len(f); i += 2 {
			kv[f[i]] = f[i+1]
		}
		if kv["type"] != "i" {
			continue
		}
		seq, err := strconv.ParseInt(kv["seq"], 10, 64)
		if err != nil || kv["file"] == "" || strings.ContainsRune(kv["file"], filepath.Separator) {
			return nil, fmt.Errorf("AOF manifest line %q: bad file or seq", line)
		}
		incr = append(incr, entry{kv["file"], seq})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(incr) == 0 {
		return nil, errors.New("the AOF manifest lists no incremental file")
	}
	sort.Slice(incr, func(i, j int) bool { return incr[i].seq < incr[j].seq })
	paths := make([]string, len(incr))
	for i, e := range incr {
		paths[i] = filepath.Join(dir, e.name)
	}
	return paths, nil
}

// cutAOFTail truncates the incremental AOF files in dir so that their last
// n commands (see KillLosingTail) are gone, from the newest file back, and
// returns how many it cut. An incomplete command at the end of the newest
// file (a torn write) goes too, without counting.
func cutAOFTail(dir string, n int) (int, error) {
	if n == 0 {
		return 0, nil
	}
	files, err := incrFiles(dir)
	if err != nil {
		return 0, err
	}
	cut := 0
	for i := len(files) - 1; i >= 0 && cut < n; i-- {
		b, err := os.ReadFile(files[i])
		if err != nil {
			return cut, err
		}
		units, end, err := aofUnits(b)
		if err != nil {
			return cut, fmt.Errorf("%s: %w", filepath.Base(files[i]), err)
		}
		size := end
		if want := n - cut; want >= len(units) {
			if len(units) > 0 {
				size = units[0]
			}
			cut += len(units)
		} else {
			size = units[len(units)-want]
			cut = n
		}
		if size < len(b) {
			if err := os.Truncate(files[i], int64(size)); err != nil {
				return cut, err
			}
		}
	}
	return cut, nil
}

// aofCommand is one command of an AOF file: its bytes are [start, end).
type aofCommand struct {
	start, end int
	name       string // upper case
}

// aofUnits parses an incremental AOF and returns the offset where each of
// its commands (a MULTI ... EXEC block being one, SELECT none) starts, and
// the end of the last complete one: what follows it is a torn write.
func aofUnits(b []byte) (units []int, end int, err error) {
	cmds, end, err := parseAOF(b)
	if err != nil {
		return nil, 0, err
	}
	multi := -1
	for _, c := range cmds {
		switch {
		case multi >= 0:
			if c.name == "EXEC" {
				units = append(units, multi)
				multi = -1
			}
		case c.name == "MULTI":
			multi = c.start
		case c.name == "SELECT":
		default:
			units = append(units, c.start)
		}
	}
	if multi >= 0 {
		// A transaction without its EXEC is torn too.
		end = multi
	}
	return units, end, nil
}

// parseAOF reads the RESP arrays of an AOF file (and the # annotation lines
// Redis may write between them). It returns them and the end of the last
// complete one; bytes after it are an incomplete command. Bytes that cannot
// start or continue a command are an error.
func parseAOF(b []byte) (cmds []aofCommand, end int, err error) {
	pos := 0
	for pos < len(b) {
		if b[pos] == '#' {
			nl := bytes.IndexByte(b[pos:], '\n')
			if nl < 0 {
				break
			}
			pos += nl + 1
			continue
		}
		c, next, complete, err := parseCommand(b, pos)
		if err != nil {
			return nil, 0, err
		}
		if !complete {
			break
		}
		cmds = append(cmds, c)
		pos = next
	}
	return cmds, pos, nil
}

// parseCommand reads the RESP array of bulk strings at b[pos:]. complete is
// false when b ends inside it.
func parseCommand(b []byte, pos int) (c aofCommand, next int, complete bool, err error) {
	c.start = pos
	argc, p, ok, err := respLen(b, pos, '*')
	if !ok || err != nil {
		return c, 0, false, err
	}
	if argc < 1 {
		return c, 0, false, fmt.Errorf("offset %d: a command of %d arguments", pos, argc)
	}
	for i := 0; i < argc; i++ {
		n, q, ok, err := respLen(b, p, '$')
		if !ok || err != nil {
			return c, 0, false, err
		}
		if q+n+2 > len(b) {
			return c, 0, false, nil
		}
		if b[q+n] != '\r' || b[q+n+1] != '\n' {
			return c, 0, false, fmt.Errorf("offset %d: a bulk string of %d bytes is not followed by CRLF", q, n)
		}
		if i == 0 {
			c.name = strings.ToUpper(string(b[q : q+n]))
		}
		p = q + n + 2
	}
	c.end = p
	return c, p, true, nil
}

// respLen reads a "<kind><decimal>\r\n" header at b[pos:] and returns the
// number and the offset after the header. ok is false when b ends inside it.
func respLen(b []byte, pos int, kind byte) (n, next int, ok bool, err error) {
	if pos >= len(b) {
		return 0, 0, false, nil
	}
	if b[pos] != kind {
		return 0, 0, false, fmt.Errorf("offset %d: %q where %q should start a RESP header", pos, b[pos], kind)
	}
	cr := bytes.IndexByte(b[pos:], '\r')
	if cr < 0 || pos+cr+1 >= len(b) {
		// Only digits can follow, up to the CRLF.
		for _, d := range b[pos+1:] {
			if (d < '0' || d > '9') && d != '-' && d != '\r' {
				return 0, 0, false, fmt.Errorf("offset %d: bad RESP header", pos)
			}
		}
		return 0, 0, false, nil
	}
	digits := b[pos+1 : pos+cr]
	if b[pos+cr+1] != '\n' {
		return 0, 0, false, fmt.Errorf("offset %d: RESP header without CRLF", pos)
	}
	v, perr := strconv.Atoi(string(digits))
	if perr != nil || v < 0 || len(digits) > 12 {
		return 0, 0, false, fmt.Errorf("offset %d: bad RESP length %q", pos, digits)
	}
	return v, pos + cr + 2, true, nil
}
