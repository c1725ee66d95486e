package main

import (
	"encoding/binary"
	"testing"
)

// pgMessage builds a PostgreSQL frontend message.
func pgMessage(typ byte, body string) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(4+len(body)))
	return append(b, body...)
}

func pgStartup() []byte {
	b := make([]byte, 8, 32)
	binary.BigEndian.PutUint32(b[4:], 196608) // protocol 3.0
	b = append(b, "user\x00idem\x00\x00"...)
	binary.BigEndian.PutUint32(b[0:], uint32(len(b)))
	return b
}

func TestPgProtocolCountsStatements(t *testing.T) {
	var stream []byte
	stream = append(stream, pgStartup()...)
	stream = append(stream, pgMessage('p', "password\x00")...)
	stream = append(stream, pgMessage('Q', "begin\x00")...)
	stream = append(stream, pgMessage('P', "\x00INSERT ...\x00\x00\x00")...) // a Parse whose text contains 'E' and 'Q'
	stream = append(stream, pgMessage('B', "EQEQ")...)
	stream = append(stream, pgMessage('E', "\x00\x00\x00\x00\x00")...)
	stream = append(stream, pgMessage('S', "")...)
	// Fed in every split, the counts must not change.
	for split := 1; split <= len(stream); split++ {
		var w wireStats
		p := &pgProtocol{}
		for i := 0; i < len(stream); i += split {
			p.feed(stream[i:min(i+split, len(stream))], &w)
		}
		if got := w.snapshot(); got.statements != 2 || got.prepares != 1 || got.opaque {
			t.Fatalf("split %d: %+v, want 2 statements and 1 prepare", split, got)
		}
	}
}

func TestPgProtocolSSLIsOpaque(t *testing.T) {
	b := make([]byte, 8)
	binary.BigEndian.PutUint32(b[0:], 8)
	binary.BigEndian.PutUint32(b[4:], 80877103)
	var w wireStats
	(&pgProtocol{}).feed(append(b, 0x16, 0x03, 0x01, 'Q'), &w)
	if got := w.snapshot(); !got.opaque || got.statements != 0 {
		t.Fatalf("after an SSLRequest: %+v, want opaque", got)
	}
}

// mysqlPacket builds a MySQL packet.
func mysqlPacket(seq byte, payload ...byte) []byte {
	n := len(payload)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}, payload...)
}

func TestMySQLProtocolCountsCommands(t *testing.T) {
	var stream []byte
	stream = append(stream, mysqlPacket(1, 0x85, 0xa6, comQuery, comStmtExecute)...) // handshake response: not a command
	stream = append(stream, mysqlPacket(0, comQuery, 'S', 'E', 'T')...)
	stream = append(stream, mysqlPacket(0, comStmtPrepare, 'I', 'N')...)
	stream = append(stream, mysqlPacket(0, comStmtExecute, 1, 0, 0, 0)...)
	stream = append(stream, mysqlPacket(0, 0x19, 1, 0, 0, 0)...) // COM_STMT_CLOSE
	stream = append(stream, mysqlPacket(0, comQuery, 'C', 'O', 'M', 'M', 'I', 'T')...)
	for split := 1; split <= len(stream); split++ {
		var w wireStats
		p := &mysqlProtocol{}
		for i := 0; i < len(stream); i += split {
			p.feed(stream[i:min(i+split, len(stream))], &w)
		}
		if got := w.snapshot(); got.statements != 3 || got.prepares != 1 {
			t.Fatalf("split %d: %+v, want 3 statements and 1 prepare", split, got)
		}
	}
}

func TestKeysAreStableAndDistinct(t *testing.T) {
	ks := newKeySpace("run", pathIdem, 16, 0)
	seen := map[string]bool{}
	for i := range int64(10000) {
		k := ks.key(i)
		if len(k) != 36 || seen[k] {
			t.Fatalf("key %d = %q: want 36 characters, unique", i, k)
		}
		seen[k] = true
		if ks.key(i) != k {
			t.Fatalf("key %d is not reproducible", i)
		}
	}
	if newKeySpace("run", pathIdem, 16, 1).key(0) == ks.key(0) {
		t.Fatal("two cells share a key")
	}
}
