package dialect_test

import (
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/idemkit/idem/dialect"
)

func TestLoadMigrations(t *testing.T) {
	table, err := dialect.NewTable("keys")
	if err != nil {
		t.Fatal(err)
	}
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	for _, tc := range []struct {
		name  string
		files fstest.MapFS
		want  []dialect.Migration
		err   string
	}{
		{
			name: "statements split at lines ending in ';', templates rendered, sorted by version",
			files: fstest.MapFS{
				"m/0002_add_index.sql": file("-- a comment line\nCREATE INDEX {{.Index \"x\"}} ON {{.Name}} (x);\n"),
				"m/0001_create.sql":    file("CREATE TABLE {{.Name}} (\n\tx int -- trailing comment\n);\n\nINSERT INTO {{.Name}} VALUES (1);"),
				"m/README.md":          file("not a migration"),
			},
			want: []dialect.Migration{
				{Version: 1, Name: "create", Statements: []string{"CREATE TABLE keys (\n\tx int -- trailing comment\n)", "INSERT INTO keys VALUES (1)"}},
				{Version: 2, Name: "add_index", Statements: []string{"CREATE INDEX keys_x ON keys (x)"}},
			},
		},
		{
			name: "down files undo their migration",
			files: fstest.MapFS{
				"m/0001_create.sql":      file("CREATE TABLE {{.Name}} (x int);"),
				"m/0001_create.down.sql": file("DROP TABLE {{.Name}};"),
				"m/2_add.sql":            file("ALTER TABLE {{.Name}} ADD y int;"),
			},
			want: []dialect.Migration{
				{Version: 1, Name: "create", Statements: []string{"CREATE TABLE keys (x int)"}, Down: []string{"DROP TABLE keys"}},
				{Version: 2, Name: "add", Statements: []string{"ALTER TABLE keys ADD y int"}},
			},
		},
		{
			name: "an applied file checks its migration",
			files: fstest.MapFS{
				"m/0001_create.sql":         file("CREATE TABLE {{.Name}} (x int);"),
				"m/0001_create.applied.sql": file("-- whether it is there\nSELECT 1 FROM catalog WHERE name = '{{.Name}}'"),
			},
			want: []dialect.Migration{
				{Version: 1, Name: "create", Statements: []string{"CREATE TABLE keys (x int)"}, Applied: "SELECT 1 FROM catalog WHERE name = 'keys'"},
			},
		},
		{name: "an applied file without its migration", files: fstest.MapFS{"m/0001_a.sql": file("A;"), "m/0002_b.applied.sql": file("B")}, err: "checks no migration"},
		{name: "an applied file of two statements", files: fstest.MapFS{"m/0001_a.sql": file("A;"), "m/0001_a.applied.sql": file("B;\nC;")}, err: "want one query"},
		{name: "a down file without its migration", files: fstest.MapFS{"m/0001_a.sql": file("A;"), "m/0002_b.down.sql": file("B;")}, err: "undoes no migration"},
		{name: "a gap", files: fstest.MapFS{"m/0001_a.sql": file("A;"), "m/0003_c.sql": file("C;")}, err: "version 2 is missing"},
		{name: "not numbered", files: fstest.MapFS{"m/first.sql": file("A;")}, err: "want NNNN_name.sql"},
		{name: "version 0", files: fstest.MapFS{"m/0000_zero.sql": file("A;")}, err: "want NNNN_name.sql"},
		{name: "empty", files: fstest.MapFS{"m/0001_empty.sql": file("-- nothing\n")}, err: "no statement"},
		{name: "unknown template field", files: fstest.MapFS{"m/0001_bad.sql": file("CREATE TABLE {{.Nope}};")}, err: "Nope"},
		{name: "no directory", files: fstest.MapFS{}, err: "migrations"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dialect.LoadMigrations(tc.files, "m", table)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("LoadMigrations = %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("LoadMigrations =\n%#v, %v\nwant\n%#v", got, err, tc.want)
			}
		})
	}
}
