package migrationfiles_test

import (
	"fmt"
	"io/fs"
	"log"

	"github.com/idemkit/idem/migrationfiles"
	"github.com/idemkit/idem/postgres"
)

// Files for a table of your own, to write into the directory your
// migration tool reads (migrationfiles.Write, or the idem command's
// migration-files).
func ExampleRender() {
	files, err := migrationfiles.Render(postgres.NewDialect(), "payment_keys", migrationfiles.GolangMigrate)
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range files {
		fmt.Println(f.Name)
	}
	// Output:
	// 0001_create_table.up.sql
	// 0001_create_table.down.sql
	// 0002_leases.up.sql
	// 0002_leases.down.sql
	// 0003_fence.up.sql
	// 0003_fence.down.sql
}

// The files for the default table are embedded: hand a directory of them
// to goose (goose.NewProvider(goose.DialectPostgres, db, dir)) or to
// golang-migrate (iofs.New(dir, ".")).
func Example_embedded() {
	dir, err := fs.Sub(migrationfiles.Embedded, "goose/postgres")
	if err != nil {
		log.Fatal(err)
	}
	names, err := fs.Glob(dir, "*.sql")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(names)
	// Output:
	// [00001_create_table.sql 00002_leases.sql 00003_fence.sql]
}
