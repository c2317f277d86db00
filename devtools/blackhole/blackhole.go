// Package blackhole is a TCP server that accepts connections and never
// answers: what a client sees of a paused server (the kernel completes the
// handshakes of a SIGSTOPped process) or of one cut off by a partition
// that drops bytes. A client's call to it ends only when its own deadline
// does, which is what tests of those deadlines need. It is a development
// tool; no production package imports it.
package blackhole

import (
	"net"
	"sync"
)

// Server accepts connections on a loopback port and reads nothing from
// them.
type Server struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	done  chan struct{}
}

// Listen starts a Server on 127.0.0.1 and a free port.
func Listen() (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, done: make(chan struct{})}
	go s.accept()
	return s, nil
}

func (s *Server) accept() {
	defer close(s.done)
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
	}
}

// Addr is the server's address, host:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// PostgresURL is a Postgres URL of the server (user u, database db, no
// TLS, a minute's connect timeout): a pool on it waits for its callers'
// deadlines, as on a paused server.
func (s *Server) PostgresURL() string {
	return "postgres://u@" + s.Addr() + "/db?sslmode=disable&connect_timeout=60"
}

// Close stops accepting and closes every connection it accepted.
func (s *Server) Close() error {
	err := s.ln.Close()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
	return err
}
