package sqlite

import (
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/idemkit/idem/dialect"
)

// The admin statements are built with squirrel, whose placeholders are ?:
// their clock must be the catalog's "now" part, written with ?.
func TestAdminClockIsTheCatalogs(t *testing.T) {
	parts, err := fs.ReadFile(queries, "queries/_parts.sql")
	if err != nil {
		t.Fatal(err)
	}
	table, _ := dialect.NewTable("t")
	q, err := dialect.LoadQueries(fstest.MapFS{
		"q/_parts.sql": {Data: parts},
		"q/x.sql":      {Data: []byte(`{{template "now"}}`)},
	}, "q", table, dialect.Question)
	if err != nil {
		t.Fatal(err)
	}
	if q["x"].SQL != adminSQL.Now {
		t.Errorf("the admin view's clock %q is not the catalog's %q", adminSQL.Now, q["x"].SQL)
	}
}
