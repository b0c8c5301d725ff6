package main

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
)

// refusingProxy answers the first refuse CONNECTs with 400 and closes, as
// our forward proxy answers proxy-chain's CONNECT on a kept-alive
// connection, and establishes the others; every refusal is counted.
func refusingProxy(t *testing.T, refuse int64) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range open {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			go func() {
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					_ = c.Close()
					return
				}
				if seen.Add(1) <= refuse {
					_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
					_ = c.Close()
					return
				}
				_, _ = c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
			}()
		}
	}()
	return ln.Addr().String(), &seen
}

// A refused CONNECT among the idle tunnels is opened again on a new
// connection and counted; past maxIdleRefusals the run fails instead of
// hiding a proxy that refuses them all.
func TestOpenIdleTunnelsOpensRefusedOnesAgain(t *testing.T) {
	for _, tc := range []struct {
		name        string
		refuse      int64
		wantRefused int
		wantErr     bool
	}{
		{name: "none refused", refuse: 0, wantRefused: 0},
		{name: "two refused, as proxy-chain's kept connections are", refuse: 2, wantRefused: 2},
		{name: "every one refused", refuse: 1 << 20, wantRefused: maxIdleRefusals + 1, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, _ := refusingProxy(t, tc.refuse)
			conns, refused, err := openIdleTunnels(t.Context(), addr, "127.0.0.1:9", 5)
			defer closeAll(conns)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want one: %t", err, tc.wantErr)
			}
			if refused != tc.wantRefused {
				t.Errorf("refused %d, want %d", refused, tc.wantRefused)
			}
			if !tc.wantErr && len(conns) != 5 {
				t.Errorf("%d tunnels open, want 5", len(conns))
			}
		})
	}
}
