package mysql

import (
	"database/sql/driver"
	"errors"
	"strings"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/dialect"
)

// Error numbers the dialect maps (MySQL and MariaDB share them).
const (
	erDupEntry            = 1062
	erLockDeadlock        = 1213
	erLockWaitTimeout     = 1205
	erLockNowait          = 3572
	erCheckRead           = 1020 // MariaDB snapshot isolation: record changed since read
	erReadOnlyTransaction = 1792
	erOptionPreventsStmt  = 1290 // --read-only server
	erNetPacketTooLarge   = 1153
	erDataTooLong         = 1406
	erTooBigRowsize       = 1118
	erWarnAllowedPacket   = 1301
	erTruncatedWrongValue = 1366
	erLongDataTooLarge    = 1210 // a prepared-statement parameter over max_allowed_packet
	erConCount            = 1040 // too many connections
	erUnknownCom          = 1047 // Galera: "WSREP has not yet prepared node for application use"
	erServerShutdown      = 1053
	erConnectionKilled    = 1927 // MariaDB
)

// Error numbers of clustered servers, and MySQL's idle disconnect.
const (
	erErrorDuringCommit    = 1180 // Galera: the write set could not be replicated (the node left the primary component)
	erRollbackDuringCommit = 3101 // MySQL Group Replication: the transaction lost certification at COMMIT
	erRunHookError         = 3100 // MySQL Group Replication: the before_commit hook failed (the member left the group, or lost its majority)
	erInteractionTimeout   = 4031 // MySQL 8.0.24+: the server closed an idle connection
	erConnHostError        = 2003 // a client error a proxy sends as its own (MySQL Router: no destination answers)
)

// Error numbers of TiDB (MySQL and MariaDB use none in 8000-9999).
const (
	tidbForUpdateConflict = 8002 // a SELECT ... FOR UPDATE transaction met a write conflict; rolled back
	tidbWriteConflict     = 8005 // optimistic transaction, write conflict; rolled back
	tidbTxnRetryable      = 8022 // commit failed and was rolled back; retry the whole transaction
	tidbSchemaChanged     = 8028 // a table the transaction used changed before COMMIT; rolled back
	tidbPDTimeout         = 9001
	tidbTiKVTimeout       = 9002
	tidbTiKVBusy          = 9003
	tidbRegionUnavailable = 9005
	tidbTiKVWriteConflict = 9007 // write conflict found in TiKV; rolled back
)

// Classify maps *mysql.MySQLError numbers and the driver's packet limit to
// the dialect meanings.
func (d *mysqlDialect) Classify(err error) error {
	if err == nil || dialect.IsClassified(err) {
		return err
	}
	if errors.Is(err, mysqldriver.ErrPktTooLarge) {
		return dialect.Classified(dialect.ErrTooLarge, err)
	}
	var me *mysqldriver.MySQLError
	if !errors.As(err, &me) {
		if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysqldriver.ErrInvalidConn) || dialect.ConnectionLost(err) {
			return dialect.Classified(dialect.ErrUnavailable, err)
		}
		return err
	}
	if d != nil && d.vitess {
		if c := classifyVitess(err, me); c != nil {
			return c
		}
	}
	switch me.Number {
	case erDupEntry:
		return dialect.Classified(dialect.ErrUniqueViolation, err)
	case erLockDeadlock:
		return dialect.Classified(dialect.ErrDeadlock, err)
	case erCheckRead, erRollbackDuringCommit,
		tidbForUpdateConflict, tidbWriteConflict, tidbTxnRetryable, tidbSchemaChanged, tidbTiKVWriteConflict:
		return dialect.Classified(dialect.ErrSerialization, err)
	case erLockWaitTimeout, erLockNowait:
		return dialect.Classified(dialect.ErrLockTimeout, err)
	case erOptionPreventsStmt:
		if d != nil && d.groupMember {
			return dialect.Classified(dialect.ErrUnavailable, err)
		}
		return dialect.Classified(dialect.ErrReadOnly, err)
	case erReadOnlyTransaction:
		return dialect.Classified(dialect.ErrReadOnly, err)
	case erNetPacketTooLarge, erDataTooLong, erTooBigRowsize, erWarnAllowedPacket, erLongDataTooLarge:
		return dialect.Classified(dialect.ErrTooLarge, err)
	case erTruncatedWrongValue:
		return dialect.Classified(dialect.ErrInvalidValue, err)
	case erConCount, erUnknownCom, erServerShutdown, erConnectionKilled, erErrorDuringCommit, erInteractionTimeout, erConnHostError,
		tidbPDTimeout, tidbTiKVTimeout, tidbTiKVBusy, tidbRegionUnavailable:
		return dialect.Classified(dialect.ErrUnavailable, err)
	}
	return err
}

func isNumber(err error, n uint16) bool {
	var me *mysqldriver.MySQLError
	return errors.As(err, &me) && me.Number == n
}

// commitError: a server error, or driver.ErrBadConn (nothing was sent), is
// a known failure; any other error from COMMIT leaves the outcome unknown.
// Two server errors mean something else at COMMIT:
//
//   - 1180 on Galera: the node left the primary component while it
//     replicated the write set. The rest of the cluster may have received
//     and committed it: the outcome is unknown.
//   - 1062 on TiDB in optimistic mode, where uniqueness is checked at
//     COMMIT: another transaction committed the key first and this one was
//     rolled back. A retry meets that record and replays it.
//   - 1180 naming the storage engine's error 149 (HA_ERR_LOCK_DEADLOCK,
//     "Lock deadlock; Retry transaction"): the engine rolled the
//     transaction back at COMMIT, as a Group Replication member does to a
//     local transaction that meets a remote one applied first. A known
//     rollback: ErrDeadlock, retried.
//   - 2000-2999, client errors, which only a proxy sends as its own (MySQL
//     Router's 2013 when it lost the server during the COMMIT it relayed):
//     the proxy cannot know whether the server committed, so neither can
//     idem.
//   - 3100 on a Group Replication member: its before_commit hook failed,
//     typically because the member lost the group's majority while the
//     transaction waited for certification. The member rolls back, but
//     the write set may have reached the majority, which certifies and
//     commits it: the outcome is unknown (grouprepl.go).
func commitError(err error) error {
	if err == nil {
		return nil
	}
	var me *mysqldriver.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case erErrorDuringCommit:
			if strings.Contains(me.Message, "Got error 149 ") {
				return dialect.Classified(dialect.ErrDeadlock, err)
			}
			return dialect.Classified(dialect.ErrCommitUnknown, err)
		case erRunHookError:
			return dialect.Classified(dialect.ErrCommitUnknown, err)
		case erDupEntry:
			return dialect.Classified(dialect.ErrSerialization, err)
		}
		if isClientRange(me.Number) {
			return dialect.Classified(dialect.ErrCommitUnknown, err)
		}
		return err
	}
	if errors.Is(err, driver.ErrBadConn) || dialect.IsClassified(err) {
		return err
	}
	return dialect.Classified(dialect.ErrCommitUnknown, err)
}

// isClientRange reports whether n is a client error number (2000-2999):
// from a server's connection, an error a proxy relays as its own.
func isClientRange(n uint16) bool { return n >= 2000 && n < 3000 }
