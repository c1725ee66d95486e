package dialect

import (
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"text/template"
)

// A backend's statement catalog: SQL files with named parameters, rendered
// per table and compiled to the backend's positional form once.
//
// A catalog is a directory of *.sql files. Each file whose name does not
// start with "_" is one statement, named by the file's base name
// (queries/claim.sql is "claim"). Files starting with "_" only define
// shared parts ({{define "columns"}}...{{end}}), which statements use with
// {{template "columns" .}}. Every file is a text/template over the Table,
// as the migrations are: {{.Name}} is the table's name, {{.Index "x"}} the
// name of its object x. A parameter is written @name (letters, digits and
// underscores); a name may occur several times. Everything else keeps its
// meaning: "@@name" passes unchanged (MySQL's system variables), as does an
// "@" not followed by a name byte (PostgreSQL's @> and <@, MySQL's quoted
// user variables such as @`saved`), an "@" right after a name byte
// or a closing quote (user@host, 'user'@host), and text inside quotes or
// comments. Hand-written positional placeholders ($1, ?), dollar-quoted
// strings and a comment opened inside a comment are refused: PostgreSQL
// nests /* */ comments and MySQL and SQLite do not, so text after an inner
// one is a comment to one and SQL to the others. Quotes end at the next
// quote of their kind ('' inside works); backslash escapes and MySQL's #
// comments are not understood, so the catalogs do not use them.

// Placeholder is how a backend writes a positional parameter.
type Placeholder int

const (
	// Dollar is PostgreSQL's $1, $2, ...: a name used twice keeps one
	// number.
	Dollar Placeholder = iota
	// Question is MySQL's and SQLite's ?: each occurrence is a parameter of
	// its own, and its value is repeated.
	Question
)

// Query is a statement compiled from named parameters to positional ones.
type Query struct {
	// Name is the statement's name in its catalog.
	Name string
	// SQL is the statement's text with positional placeholders.
	SQL string
	// params is the name behind each positional parameter, in order.
	params []string
	// names is each distinct name once, in order of first use.
	names []string
}

// Params returns the distinct parameter names of q, in order of first use.
func (q Query) Params() []string { return append([]string(nil), q.names...) }

// Args puts named values in the order q's placeholders need them. Every
// name q uses must have exactly one value and every value must be used:
// a missing, repeated or unknown name is an error wrapping ErrInvalidConfig,
// which names the statement (a bug in the backend, not in its input).
func (q Query) Args(named ...sql.NamedArg) ([]any, error) {
	if len(named) != len(q.names) {
		return nil, q.argsError(named)
	}
	args := make([]any, len(q.params))
	for i, p := range q.params {
		found := false
		for _, n := range named {
			if n.Name == p {
				args[i] = n.Value
				found = true
				break
			}
		}
		if !found {
			return nil, q.argsError(named)
		}
	}
	// Same count and every name q uses found among them: the names given
	// are exactly q's.
	return args, nil
}

func (q Query) argsError(named []sql.NamedArg) error {
	given := make([]string, len(named))
	for i, n := range named {
		given[i] = n.Name
	}
	return fmt.Errorf("%w: statement %q takes @%s, given @%s", ErrInvalidConfig, q.Name,
		strings.Join(q.names, ", @"), strings.Join(given, ", @"))
}

// Compile rewrites text's @name parameters to p's placeholders.
func Compile(name, text string, p Placeholder) (Query, error) {
	q := Query{Name: name}
	var b strings.Builder
	number := map[string]int{}
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			end := strings.IndexByte(text[i+1:], c)
			if end < 0 {
				return Query{}, fmt.Errorf("%w: statement %q: unterminated %c", ErrInvalidConfig, name, c)
			}
			b.WriteString(text[i : i+end+2])
			i += end + 2
		case c == '-' && strings.HasPrefix(text[i:], "--"):
			end := strings.IndexByte(text[i:], '\n')
			if end < 0 {
				end = len(text) - i
			}
			b.WriteString(text[i : i+end])
			i += end
		case c == '/' && strings.HasPrefix(text[i:], "/*"):
			end := strings.Index(text[i+2:], "*/")
			if end < 0 {
				return Query{}, fmt.Errorf("%w: statement %q: unterminated comment", ErrInvalidConfig, name)
			}
			if inner := strings.Index(text[i+2:i+2+end], "/*"); inner >= 0 {
				return Query{}, fmt.Errorf("%w: statement %q: a comment opened inside a comment at byte %d: PostgreSQL nests comments, MySQL and SQLite do not, so what follows is read differently; do not nest them",
					ErrInvalidConfig, name, i+2+inner)
			}
			b.WriteString(text[i : i+end+4])
			i += end + 4
		case c == '@' && strings.HasPrefix(text[i:], "@@"):
			j := i + 2
			for j < len(text) && isParamByte(text[j]) {
				j++
			}
			b.WriteString(text[i:j])
			i = j
		case c == '$' && i+1 < len(text) && (text[i+1] == '$' || text[i+1] >= '0' && text[i+1] <= '9'),
			c == '?':
			// A positional placeholder written by hand would collide with
			// the numbered ones, and a dollar-quoted string would hide
			// parameters this scanner cannot see: both are refused.
			return Query{}, fmt.Errorf("%w: statement %q: %q at byte %d: write parameters as @name (and no dollar quoting)", ErrInvalidConfig, name, text[i:min(i+2, len(text))], i)
		case c == '@' && i+1 < len(text) && isParamByte(text[i+1]) && (i == 0 || !isParamByte(text[i-1]) && !isQuote(text[i-1])):
			// Not after a name byte or a closing quote (an opening one
			// took its string whole): user@host and 'user'@host name an
			// account, not a parameter.
			j := i + 1
			for j < len(text) && isParamByte(text[j]) {
				j++
			}
			param := text[i+1 : j]
			if _, seen := number[param]; !seen {
				q.names = append(q.names, param)
				number[param] = len(q.names)
				if p == Dollar {
					q.params = append(q.params, param)
				}
			}
			if p == Dollar {
				b.WriteString("$" + strconv.Itoa(number[param]))
			} else {
				b.WriteByte('?')
				q.params = append(q.params, param)
			}
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	q.SQL = b.String()
	return q, nil
}

func isQuote(c byte) bool { return c == '\'' || c == '"' || c == '`' }

func isParamByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// LoadQueries renders the catalog in dir of fsys for t and compiles every
// statement to p's placeholders.
func LoadQueries(fsys fs.FS, dir string, t Table, p Placeholder) (map[string]Query, error) {
	files, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("%w: no statements in %s: %v", ErrInvalidConfig, dir, err)
	}
	set := template.New(dir).Option("missingkey=error")
	for _, f := range files {
		text, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
		if _, err := set.New(path.Base(f)).Parse(string(text)); err != nil {
			return nil, fmt.Errorf("parse %s: %w", f, err)
		}
	}
	queries := map[string]Query{}
	for _, f := range files {
		base := path.Base(f)
		if strings.HasPrefix(base, "_") {
			continue
		}
		var b strings.Builder
		if err := set.ExecuteTemplate(&b, base, t); err != nil {
			return nil, fmt.Errorf("render %s for table %s: %w", f, t.Name(), err)
		}
		name := strings.TrimSuffix(base, ".sql")
		q, err := Compile(name, strings.TrimSpace(b.String()), p)
		if err != nil {
			return nil, err
		}
		queries[name] = q
	}
	return queries, nil
}

// MustLoadQueries is LoadQueries for a catalog embedded in the backend,
// where an error is a bug in its files: it panics.
func MustLoadQueries(fsys fs.FS, dir string, t Table, p Placeholder) map[string]Query {
	q, err := LoadQueries(fsys, dir, t, p)
	if err != nil {
		panic(err)
	}
	return q
}

// Catalog hands out a loaded catalog's statements by name, so that a
// backend's newStatements takes each one once and learns of a file nothing
// runs. Its panics are bugs in the backend's own files.
type Catalog struct {
	backend string
	queries map[string]Query
	taken   map[string]bool
}

// NewCatalog wraps queries (from LoadQueries) of the named backend.
func NewCatalog(backend string, queries map[string]Query) *Catalog {
	return &Catalog{backend: backend, queries: queries, taken: map[string]bool{}}
}

// Take returns the statement name; it panics when the catalog has none.
func (c *Catalog) Take(name string) Query {
	q, ok := c.queries[name]
	if !ok {
		panic(fmt.Sprintf("%s: no statement queries/%s.sql", c.backend, name))
	}
	c.taken[name] = true
	return q
}

// Done panics when a statement of the catalog was never taken: a file
// that nothing runs is a statement that silently went out of use.
func (c *Catalog) Done() {
	var unused []string
	for name := range c.queries {
		if !c.taken[name] {
			unused = append(unused, name)
		}
	}
	if len(unused) > 0 {
		sort.Strings(unused)
		panic(fmt.Sprintf("%s: statements in queries/ that nothing runs: %s", c.backend, strings.Join(unused, ", ")))
	}
}

// MustCompilePart compiles text, which uses the shared parts of the catalog
// in dir ({{template "now"}}), with p's placeholders. It is for the SQL a
// backend builds in Go (the admin view's filters, with squirrel's ?), so
// that it says what the catalog says instead of a copy. The parts are
// rendered without a table: text must not need one. It panics on an error,
// a bug in the backend's own files.
func MustCompilePart(fsys fs.FS, dir, text string, p Placeholder) string {
	parts, err := fs.Glob(fsys, path.Join(dir, "_*.sql"))
	if err != nil || len(parts) == 0 {
		panic(fmt.Sprintf("no shared parts in %s: %v", dir, err))
	}
	set := template.New("part").Option("missingkey=error")
	for _, f := range parts {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			panic(err)
		}
		if _, err := set.New(path.Base(f)).Parse(string(b)); err != nil {
			panic(fmt.Sprintf("parse %s: %v", f, err))
		}
	}
	if _, err := set.New("text").Parse(text); err != nil {
		panic(fmt.Sprintf("parse %q: %v", text, err))
	}
	var b strings.Builder
	if err := set.ExecuteTemplate(&b, "text", Table{}); err != nil {
		panic(fmt.Sprintf("render %q with %s's parts: %v", text, dir, err))
	}
	q, err := Compile("part", b.String(), p)
	if err != nil {
		panic(err)
	}
	return q.SQL
}
