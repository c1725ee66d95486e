package mysql

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"

	"github.com/idemkit/idem/dialect"
)

// The dialect's statements go to the server as text with their values
// written in as literals, so each is one round trip (COM_QUERY) whatever
// the DSN says: with go-sql-driver's default (interpolateParams=false) a
// statement with arguments is a server-side prepare, an execute and a close,
// two round trips. Every literal is a hexadecimal string (X'…'), an integer
// or NULL, so no value can change the statement, whatever sql_mode or
// character set the session has. A statement whose literals would be large
// (a big response body) keeps its placeholders instead: binary parameters
// are half the size of hex, and max_allowed_packet stays the limit it was.

// inlineLimit is the largest statement written with literals.
const inlineLimit = 64 << 10

// inline returns query with each ? placeholder (outside quotes) replaced by
// the literal of its argument, or false when it cannot or should not.
func inline(query string, args []any) (string, bool) {
	size := len(query)
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			size += 3 + 2*len(v)
		case string:
			size += 3 + 2*len(v)
		case nil:
			size += 4
		case int64, int:
			size += 20
		default:
			return "", false
		}
	}
	if size > inlineLimit {
		return "", false
	}
	var b strings.Builder
	b.Grow(size)
	next := 0
	var quote byte // the quote character we are inside, or 0
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '`' || c == '"':
			quote = c
		case c == '?':
			if next == len(args) {
				return "", false
			}
			writeLiteral(&b, args[next])
			next++
			continue
		}
		b.WriteByte(c)
	}
	if next != len(args) || quote != 0 {
		return "", false
	}
	return b.String(), true
}

func writeLiteral(b *strings.Builder, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("NULL")
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case int:
		b.WriteString(strconv.Itoa(v))
	case []byte:
		writeHex(b, v)
	case string:
		writeHex(b, v)
	}
}

const hexDigits = "0123456789ABCDEF"

func writeHex[T string | []byte](b *strings.Builder, v T) {
	b.WriteString("X'")
	for i := 0; i < len(v); i++ {
		b.WriteByte(hexDigits[v[i]>>4])
		b.WriteByte(hexDigits[v[i]&0x0f])
	}
	b.WriteByte('\'')
}

// exec runs one of the dialect's statements, inlined when it can be.
func exec(ctx context.Context, q dialect.Queryer, query string, args ...any) (int64, error) {
	if s, ok := inline(query, args); ok {
		return q.Exec(ctx, s)
	}
	return q.Exec(ctx, query, args...)
}

// query runs one of the dialect's queries, inlined when it can be.
func query(ctx context.Context, q dialect.Queryer, query string, args ...any) (dialect.Rows, error) {
	if s, ok := inline(query, args); ok {
		return q.Query(ctx, s)
	}
	return q.Query(ctx, query, args...)
}

// execNamed runs one of the catalog's statements with its parameters bound
// by name, inlined when it can be.
func execNamed(ctx context.Context, q dialect.Queryer, stmt dialect.Query, named ...sql.NamedArg) (int64, error) {
	args, err := stmt.Args(named...)
	if err != nil {
		return 0, err
	}
	return exec(ctx, q, stmt.SQL, args...)
}

// queryNamed runs one of the catalog's queries with its parameters bound by
// name, inlined when it can be.
func queryNamed(ctx context.Context, q dialect.Queryer, stmt dialect.Query, named ...sql.NamedArg) (dialect.Rows, error) {
	args, err := stmt.Args(named...)
	if err != nil {
		return nil, err
	}
	return query(ctx, q, stmt.SQL, args...)
}

// queryInt64 runs a query of one integer column and returns the first
// row's value, or 0 when there is no row.
func queryInt64(ctx context.Context, q dialect.Queryer, stmt string, args ...any) (int64, error) {
	rows, err := query(ctx, q, stmt, args...)
	if err != nil {
		return 0, err
	}
	var n int64
	if rows.Next() {
		err = rows.Scan(&n)
	}
	return n, errors.Join(err, dialect.CloseRows(rows))
}
