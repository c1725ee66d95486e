package migrationfiles_test

import (
	"bytes"
	"errors"
	"flag"
	"io/fs"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/migrationfiles"
	"github.com/idemkit/idem/mysql"
	"github.com/idemkit/idem/postgres"
	"github.com/idemkit/idem/sqlite"
)

var update = flag.Bool("update", false, "rewrite the checked-in files from the backends' migrations")

// backends are the dialects whose files are checked in, by directory.
var backends = []struct {
	dir string
	d   dialect.Dialect
}{
	{"sqlite", sqlite.NewDialect()},
	{"postgres", postgres.NewDialect()},
	{"mysql", mysql.NewDialect()},
}

// TestCheckedInFilesMatch fails when the checked-in files for the default
// table drift from what the backends' migrations render: after adding or
// changing a migration, run
//
//	go test ./migrationfiles -update
func TestCheckedInFilesMatch(t *testing.T) {
	for _, b := range backends {
		for _, f := range migrationfiles.Formats() {
			dir := path.Join(string(f), b.dir)
			t.Run(dir, func(t *testing.T) {
				files, err := migrationfiles.Render(b.d, idem.DefaultTable, f)
				if err != nil {
					t.Fatal(err)
				}
				if *update {
					if err := migrationfiles.Write(dir, files); err != nil {
						t.Fatal(err)
					}
					return
				}
				var want []string
				for _, file := range files {
					want = append(want, file.Name)
					got, err := fs.ReadFile(migrationfiles.Embedded, path.Join(dir, file.Name))
					if err != nil || !bytes.Equal(got, file.Data) {
						t.Errorf("%s/%s differs from what the %s migrations render (%v); run: go test ./migrationfiles -update", dir, file.Name, b.dir, err)
					}
				}
				entries, err := fs.ReadDir(migrationfiles.Embedded, dir)
				if err != nil {
					t.Fatal(err)
				}
				var have []string
				for _, e := range entries {
					have = append(have, e.Name())
				}
				slices.Sort(want)
				if !slices.Equal(have, want) {
					t.Errorf("%s holds %v, want %v; run: go test ./migrationfiles -update", dir, have, want)
				}
			})
		}
	}
}

func TestRender(t *testing.T) {
	files, err := migrationfiles.Render(postgres.NewDialect(), "my_keys", migrationfiles.Goose)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 || files[0].Name != "00001_create_table.sql" {
		t.Fatalf("goose files %v, want 00001_create_table.sql first", files)
	}
	text := string(files[0].Data)
	up, down, ok := strings.Cut(text, "-- +goose Down\n")
	for _, want := range []string{`CREATE TABLE IF NOT EXISTS "my_keys"`, `CREATE TABLE IF NOT EXISTS "my_keys_schema"`,
		`INSERT INTO "my_keys_schema" (version, name) VALUES (1, 'create_table') ON CONFLICT (version) DO NOTHING;`} {
		if !ok || !strings.Contains(up, want) || !strings.Contains(up, "-- +goose Up\n") {
			t.Errorf("up section lacks %q:\n%s", want, up)
		}
	}
	if !strings.Contains(down, `DROP TABLE IF EXISTS "my_keys";`) || !strings.Contains(down, `DROP TABLE IF EXISTS "my_keys_schema";`) {
		t.Errorf("down section:\n%s", down)
	}
	if strings.Contains(text, "idempotency_keys") {
		t.Errorf("files for my_keys name the default table:\n%s", text)
	}

	gm, err := migrationfiles.Render(mysql.NewDialect(), "my_keys", migrationfiles.GolangMigrate)
	if err != nil {
		t.Fatal(err)
	}
	if len(gm) < 2 || gm[0].Name != "0001_create_table.up.sql" || gm[1].Name != "0001_create_table.down.sql" {
		t.Fatalf("golang-migrate files %v", gm)
	}

	if _, err := migrationfiles.Render(sqlite.NewDialect(), "bad name", migrationfiles.Goose); !errors.Is(err, dialect.ErrInvalidIdentifier) {
		t.Errorf("Render for a bad table name: %v, want ErrInvalidIdentifier", err)
	}
	if _, err := migrationfiles.Render(sqlite.NewDialect(), "k", "flyway"); !errors.Is(err, dialect.ErrInvalidConfig) {
		t.Errorf("Render in an unknown format: %v, want ErrInvalidConfig", err)
	}
	if _, err := migrationfiles.Render(noScripts{sqlite.NewDialect()}, "k", migrationfiles.Goose); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Render for a dialect that is no Scripter: %v, want ErrUnsupported", err)
	}
}

// noScripts hides the Scripter of the dialect it wraps.
type noScripts struct{ dialect.Dialect }
