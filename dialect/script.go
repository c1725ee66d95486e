package dialect

// Scripter is a Dialect that can write the bookkeeping of its schema's
// version as plain SQL with literal values, for migration tools that run
// SQL files (golang-migrate, goose): the files they run then record each
// version in the same version table Store.Migrate keeps, so Store.Migrate
// and Store.Version agree with the tool about where the table stands.
//
// Absence: package migrationfiles refuses to write files for a Dialect that
// is not a Scripter (errors.ErrUnsupported); Store.Migrate does not need it.
type Scripter interface {
	// RecordVersionSQL records migration m of t's schema in the version
	// table (Schema.CreateVersionTable), doing nothing when that version is
	// recorded already (a table Store.Migrate migrated earlier).
	RecordVersionSQL(t Table, m Migration) string
	// ForgetVersionSQL removes the record of migration m, after its Down
	// statements ran.
	ForgetVersionSQL(t Table, m Migration) string
	// DropVersionTableSQL drops the version table, when the first
	// migration is undone.
	DropVersionTableSQL(t Table) string
}
