"""The session database schema as an append-only list of named migrations.

``PRAGMA user_version`` holds how many migrations a database has had; each one
runs in the same transaction that bumps the version, so a crash mid-upgrade
leaves the previous schema. Never edit or reorder an entry: append a new one.
"""

from __future__ import annotations

import sqlite3
import time

from harness9.store.locking import begin_immediate

# The text indexed for a message row ``new`` (part of migration 4: never edit it; a change
# is a new migration that rebuilds the index). Invalid JSON is indexed as nothing rather
# than failing the insert: the store reports such rows as corrupt, it must still write them.
_FTS_BODY_V4 = """replace(replace(
    new.content || coalesce((
        SELECT char(10) || group_concat(
            coalesce(json_extract(c.value, '$.name'), '') || ' ' || coalesce(
                CASE WHEN json_valid(json_extract(c.value, '$.arguments')) THEN (
                    SELECT group_concat(a.atom, ' ') FROM json_tree(
                        json_extract(c.value, '$.arguments')) AS a
                    WHERE a.type IN ('text', 'integer', 'real'))
                ELSE json_extract(c.value, '$.arguments') END, ''),
            char(10))
        FROM json_each(CASE WHEN json_valid(new.tool_calls) THEN new.tool_calls ELSE '[]' END)
            AS c
        WHERE c.type = 'object'), ''),
    char(2), ' '), char(3), ' ')"""


# Migration 4's back-fill, word for word. The runner leaves it out and lets the bounded
# catch-up fill the index instead (see ``migrate``): on a large store it was one
# transaction holding the write lock for seconds.
_FTS_BACKFILL_V4 = (
    f"INSERT INTO messages_fts (rowid, body) SELECT new.id, {_FTS_BODY_V4} FROM messages AS new;"
)


# Whether a row aliased ``new`` may hold CJK text (part of migration index_cjk_trigram:
# never edit it; a change is a new migration). Only such rows go into the trigram index.
# GLOB with a character class costs several times the whole unicode61 indexing, so the
# test is on UTF-8 lead bytes instead: every kana, CJK ideograph (extension A included),
# compatibility ideograph and Hangul syllable starts with E3-ED or EF, and a byte length
# equal to the character length (pure ASCII, the common case) skips even that. Tool-call
# arguments may spell CJK as JSON escapes (backslash-u), so any escape counts. A few
# non-CJK rows pass too; a query needs CJK text to look in this index at all.
def _cjk_bytes(column: str) -> str:
    blob = f"CAST({column} AS BLOB)"
    lead_bytes = ("E3", "E4", "E5", "E6", "E7", "E8", "E9", "EA", "EB", "EC", "ED", "EF")
    leads = " OR ".join(f"instr({blob}, X'{b}') > 0" for b in lead_bytes)
    return f"(length({blob}) > length({column}) AND ({leads}))"


CJK_ROW = (
    f"({_cjk_bytes('new.content')} OR (new.tool_calls IS NOT NULL AND "
    f"({_cjk_bytes('new.tool_calls')} OR instr(new.tool_calls, '\\u') > 0)))"
)

# (name, SQL). The name is recorded in schema_migrations for whoever opens the file by hand.
MIGRATIONS: list[tuple[str, str]] = [
    (
        "create_sessions_and_messages",
        """
        CREATE TABLE sessions (
            id            TEXT    PRIMARY KEY,          -- UUID v4, canonical lower-case form
            created_at    REAL    NOT NULL,             -- Unix seconds
            updated_at    REAL    NOT NULL,
            title         TEXT    NOT NULL DEFAULT '',  -- first user message, one line
            message_count INTEGER NOT NULL DEFAULT 0    -- maintained by every write
        );
        CREATE TABLE messages (
            id           INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: checkpoints point here
            session_id   TEXT    NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            role         TEXT    NOT NULL,
            content      TEXT    NOT NULL,
            tool_calls   TEXT,            -- JSON [{id, name, arguments}], NULL when none
            tool_call_id TEXT,            -- NULL unless a tool result
            created_at   REAL    NOT NULL
        );
        CREATE INDEX idx_messages_session ON messages(session_id, id);
        CREATE INDEX idx_sessions_updated ON sessions(updated_at, created_at);
        """,
    ),
    (
        "create_todos",
        """
        CREATE TABLE todos (
            session_id TEXT    NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            position   INTEGER NOT NULL,
            content    TEXT    NOT NULL,
            status     TEXT    NOT NULL,
            PRIMARY KEY (session_id, position)
        ) WITHOUT ROWID;
        """,
    ),
    (
        "create_compactions",
        """
        CREATE TABLE compactions (
            id              INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id      TEXT    NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            last_message_id INTEGER NOT NULL,
            summary         TEXT    NOT NULL,
            strategy        TEXT    NOT NULL,
            tokens_before   INTEGER NOT NULL,
            tokens_after    INTEGER NOT NULL,
            messages_before INTEGER NOT NULL,
            messages_after  INTEGER NOT NULL,
            created_at      REAL    NOT NULL
        );
        CREATE INDEX idx_compactions_session ON compactions(session_id, last_message_id);
        """,
    ),
    (
        # Full-text search. A plain (not external-content) FTS5 table: deleting a row needs
        # only its rowid, so a trigger can never corrupt the index by passing stale text.
        # Triggers keep it in sync on every path: the store's writes, ON DELETE CASCADE
        # and anyone editing the file by hand. The indexed body is the message text plus
        # each tool call's name and the decoded values of its JSON arguments (so a bash
        # command with newlines is found by its words); the snippet() highlight markers
        # \x02/\x03 are blanked out of the text so a highlight is never ambiguous.
        "create_messages_fts",
        f"""
        CREATE VIRTUAL TABLE messages_fts USING fts5(body, tokenize = 'unicode61');
        CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
            INSERT INTO messages_fts (rowid, body) VALUES (new.id, {_FTS_BODY_V4});
        END;
        CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
            DELETE FROM messages_fts WHERE rowid = old.id;
        END;
        CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages BEGIN
            DELETE FROM messages_fts WHERE rowid = old.id;
            INSERT INTO messages_fts (rowid, body) VALUES (new.id, {_FTS_BODY_V4});
        END;
        -- Back-fill. The alias lets the one expression serve the triggers and this.
        {_FTS_BACKFILL_V4}
        """,
    ),
    (
        # Deferred indexing: the insert trigger made every message write ~5x slower, and
        # writes happen on every chat message while searches are rare. Now a search first
        # indexes the messages written since the last one (harness9.store.fts_index).
        # Invariant: messages_fts holds exactly the rows with id <= fts_state.indexed_upto.
        # AUTOINCREMENT keeps new ids above the mark; import, which may restore older ids,
        # indexes those rows itself. Deletes stay synchronous (migration 4's trigger; a
        # missing rowid is a no-op for this non-external-content table). The update trigger
        # re-indexes only rows below the mark: one above it is not indexed yet, and a second
        # insert of the same rowid would make the catch-up fail.
        "index_messages_lazily",
        f"""
        DROP TRIGGER messages_fts_insert;
        DROP TRIGGER messages_fts_update;
        CREATE TABLE fts_state (
            id           INTEGER PRIMARY KEY CHECK (id = 1),  -- exactly one row
            indexed_upto INTEGER NOT NULL   -- highest message id the index has caught up to
        );
        -- Migration 4's trigger and back-fill indexed every row there is.
        INSERT INTO fts_state (id, indexed_upto) SELECT 1, coalesce(max(id), 0) FROM messages;
        CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages BEGIN
            DELETE FROM messages_fts WHERE rowid = old.id;
            INSERT INTO messages_fts (rowid, body) SELECT new.id, {_FTS_BODY_V4}
                WHERE new.id <= (SELECT indexed_upto FROM fts_state);
        END;
        """,
    ),
    (
        # What a session's model calls consumed, summed as they happen: the token line's
        # cost and `sessions list/show --json` read it. One row per session; cost_usd sums
        # only the calls whose price was known, unpriced_calls counts the others.
        "create_session_usage",
        """
        CREATE TABLE session_usage (
            session_id     TEXT    PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
            model_calls    INTEGER NOT NULL DEFAULT 0,
            input_tokens   INTEGER NOT NULL DEFAULT 0,  -- including the cached ones
            output_tokens  INTEGER NOT NULL DEFAULT 0,
            cached_tokens  INTEGER NOT NULL DEFAULT 0,  -- input tokens read from a prompt cache
            cost_usd       REAL    NOT NULL DEFAULT 0,
            unpriced_calls INTEGER NOT NULL DEFAULT 0
        ) WITHOUT ROWID;
        """,
    ),
    (
        # CJK search. unicode61 makes a whole run of CJK characters one token, so a word
        # inside a Chinese sentence was never found. Rows holding CJK text are also indexed
        # with the trigram tokenizer, which matches any substring of 3+ characters (shorter
        # CJK terms are matched with LIKE on these rows). The rest keep unicode61 and bm25.
        # A deferred index like messages_fts (harness9.store.fts_index): it holds exactly
        # the CJK rows with id <= fts_state.cjk_indexed_upto, filled by the bounded
        # catch-up from 0 (no back-fill here), emptied at once by its delete trigger.
        "index_cjk_trigram",
        f"""
        CREATE VIRTUAL TABLE messages_cjk USING fts5(body, tokenize = 'trigram');
        -- fts_state gains the trigram index's mark. Rebuilt rather than ALTERed: after
        -- ALTER TABLE ADD COLUMN, SQLite 3.40 with foreign_keys=ON answered "no such
        -- table: messages" to every DELETE on a connection that re-read the schema (a
        -- trigger created by another process was enough). The update trigger reading it
        -- is dropped and recreated, unchanged, around the rebuild.
        DROP TRIGGER messages_fts_update;
        CREATE TABLE fts_state_old AS SELECT id, indexed_upto FROM fts_state;
        DROP TABLE fts_state;
        CREATE TABLE fts_state (
            id               INTEGER PRIMARY KEY CHECK (id = 1),  -- exactly one row
            indexed_upto     INTEGER NOT NULL,  -- messages_fts has every message up to it
            cjk_indexed_upto INTEGER NOT NULL DEFAULT 0  -- messages_cjk: every CJK one
        );
        INSERT INTO fts_state (id, indexed_upto) SELECT id, indexed_upto FROM fts_state_old;
        DROP TABLE fts_state_old;
        CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages BEGIN
            DELETE FROM messages_fts WHERE rowid = old.id;
            INSERT INTO messages_fts (rowid, body) SELECT new.id, {_FTS_BODY_V4}
                WHERE new.id <= (SELECT indexed_upto FROM fts_state);
        END;
        CREATE TRIGGER messages_cjk_delete AFTER DELETE ON messages BEGIN
            DELETE FROM messages_cjk WHERE rowid = old.id;
        END;
        CREATE TRIGGER messages_cjk_update AFTER UPDATE ON messages BEGIN
            DELETE FROM messages_cjk WHERE rowid = old.id;
            INSERT INTO messages_cjk (rowid, body) SELECT new.id, {_FTS_BODY_V4}
                WHERE new.id <= (SELECT cjk_indexed_upto FROM fts_state) AND {CJK_ROW};
        END;
        """,
    ),
    (
        # Recall memory and cache-stable eviction (see docs/architecture.md, 'Nothing the agent
        # saw becomes unreachable' and 'Cache-stable requests'). A
        # checkpoint now also carries the index of the tool results it folded (rendered,
        # with their recall handles), the eviction stubs that replace kept messages in the
        # view (JSON {message id: content}; the log itself is never rewritten) and the
        # state note (todos) the view shows after it.
        "checkpoint_recall_index_rewrites_and_state",
        # A table of its own, not ALTER TABLE ADD COLUMN: on SQLite 3.40 any added column
        # makes later deletes from ``messages`` fail with "no such table: messages" once
        # another connection changes the schema (the FTS5 delete trigger is re-parsed).
        """
        CREATE TABLE compaction_details (
            compaction_id INTEGER PRIMARY KEY REFERENCES compactions(id) ON DELETE CASCADE,
            recall_index  TEXT    NOT NULL,
            rewrites      TEXT    NOT NULL,   -- JSON {message id: stub content}, '' for none
            state_note    TEXT    NOT NULL
        );
        """,
    ),
    (
        # The model and context window a session last used, so `harness9 compact` judges
        # it as chat does without the user repeating --model/--context-window.
        "session_model_and_context_window",
        # A table of its own, for the same reason as compaction_details.
        """
        CREATE TABLE session_settings (
            session_id     TEXT    PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
            model          TEXT    NOT NULL,
            context_window INTEGER NOT NULL
        ) WITHOUT ROWID;
        """,
    ),
    (
        # The part of a session's usage that compaction summaries consumed: they are model
        # calls the user is billed for, counted in the totals above and shown apart by
        # /context. Same meaning as the totals' columns, for summary calls only.
        "session_usage_summary_calls",
        """
        ALTER TABLE session_usage ADD COLUMN summary_calls INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE session_usage ADD COLUMN summary_input_tokens INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE session_usage ADD COLUMN summary_output_tokens INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE session_usage ADD COLUMN summary_cost_usd REAL NOT NULL DEFAULT 0;
        ALTER TABLE session_usage ADD COLUMN summary_unpriced_calls INTEGER NOT NULL DEFAULT 0;
        """,
    ),
    (
        # Imports in bounded steps (harness9.store.staged_import). A large session is
        # written a batch at a time, each batch its own short transaction, so another
        # harness9 saving meanwhile never waits long. Until its last step the session has
        # no row in ``sessions``, so no read path (they all start from or join sessions)
        # can see it; this row says who is writing it, so an import that died half-way is
        # recognised and its rows removed. No REFERENCES: the session row comes last.
        "track_unfinished_imports",
        """
        CREATE TABLE session_imports (
            session_id TEXT    PRIMARY KEY,
            token      TEXT    NOT NULL,  -- the importer (or the cleaner) that owns it now
            first_id   INTEGER NOT NULL,  -- message ids kept from the file: reserved
            last_id    INTEGER NOT NULL,  -- (0 and 0 when the import takes fresh ids)
            pid        INTEGER NOT NULL,  -- the owner's process, on
            host       TEXT    NOT NULL,  -- this host
            started_at REAL    NOT NULL,
            touched_at REAL    NOT NULL   -- the owner's last step
        ) WITHOUT ROWID;
        """,
    ),
    (
        # When a session was imported into this store (NULL: it was made here). Retention
        # and `sessions delete --older-than` count an import as an update, so a session
        # imported today is not deleted for its original updated_at, which stays as it was
        # (sessions list and export show when its conversation last changed).
        "session_imported_at",
        """
        ALTER TABLE sessions ADD COLUMN imported_at REAL;
        """,
    ),
    (
        # Prompt-cache writes apart from plain input (Anthropic bills them at 1.25x or 2x
        # the input price, reads at 0.1x): part of input_tokens, as cached_tokens is.
        "session_usage_cache_writes",
        """
        ALTER TABLE session_usage ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
        """,
    ),
    (
        # The API base and working directory chat last ran a session with, beside its model
        # and window: --continue/--resume and `compact` reuse them (a session served by a
        # local server must not be sent to the hosted provider), --continue prefers the
        # current directory's sessions, listings show where each one ran.
        "session_api_base_and_workdir",
        """
        ALTER TABLE session_settings ADD COLUMN api_base TEXT NOT NULL DEFAULT '';
        ALTER TABLE session_settings ADD COLUMN workdir TEXT NOT NULL DEFAULT '';
        """,
    ),
    (
        # Going back (issue 21). Pins: notes the user keeps in every request of the session
        # until unpinned, in the order pinned. Lineage: a fork's origin (no REFERENCES on
        # it: deleting an origin leaves its forks intact, naming an id that is gone) and
        # the message number it was forked at. A checkpoint's earlier instructions: the
        # user's messages it folded, kept verbatim (JSON list of strings, oldest first).
        # Tables of their own, for the same reason as compaction_details.
        "pins_forks_and_checkpoint_instructions",
        """
        CREATE TABLE session_pins (
            id         INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT    NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            text       TEXT    NOT NULL,
            created_at REAL    NOT NULL
        );
        CREATE INDEX idx_session_pins ON session_pins(session_id, id);
        CREATE TABLE session_forks (
            session_id     TEXT    PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
            origin_id      TEXT    NOT NULL,
            origin_message INTEGER NOT NULL  -- as `sessions show` numbers the origin's messages
        ) WITHOUT ROWID;
        CREATE INDEX idx_session_forks_origin ON session_forks(origin_id);
        CREATE TABLE compaction_instructions (
            compaction_id INTEGER PRIMARY KEY REFERENCES compactions(id) ON DELETE CASCADE,
            messages      TEXT    NOT NULL
        );
        """,
    ),
    (
        # A sub-agent's conversation (the `task` tool) is a session of its own; this row says
        # whose tool call started it. A table of its own for the reason compaction_details
        # has one. Deleting the parent deletes its children in the same transaction
        # (harness9.store.sessions: the cascade below only removes the link).
        "subagent_sessions",
        """
        CREATE TABLE subagent_sessions (
            session_id   TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
            parent_id    TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            tool_call_id TEXT NOT NULL,             -- the parent's `task` call
            description  TEXT NOT NULL DEFAULT ''   -- the call's short description
        ) WITHOUT ROWID;
        CREATE INDEX subagent_sessions_parent ON subagent_sessions (parent_id);
        """,
    ),
    (
        # A fork shares its origin's rows instead of copying them (harness9.store.lineage):
        # this row says that ``session_id`` also holds the messages ``base_id`` holds (its
        # own and those it inherits in turn) with ids up to ``upto_id``. A fork's own rows
        # all have larger ids, so ordering by id gives the fork's order. Deleting a base
        # first hands its shared rows to the fork that sees most of them (the trigger);
        # REFERENCES without a cascade: a base is never deleted under its forks.
        "forks_share_their_origins_messages",
        f"""
        CREATE TABLE inherited_messages (
            session_id TEXT    PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
            base_id    TEXT    NOT NULL REFERENCES sessions(id),
            upto_id    INTEGER NOT NULL  -- the newest message id of the base it sees
        ) WITHOUT ROWID;
        CREATE INDEX idx_inherited_messages_base ON inherited_messages(base_id, upto_id);
        -- A hand-over of ``session_id``'s shared rows to the fork that sees most of them
        -- (the heir, recorded in the row): it takes the session's own rows that it sees
        -- (same ids), the session's other forks inherit them from it instead, and it
        -- inherits what the session inherited, as far as it saw. Inserted before a
        -- session is deleted (below), and by an /undo or clear of rows forks still see.
        CREATE TABLE shared_hand_overs (
            id         INTEGER PRIMARY KEY,
            session_id TEXT    NOT NULL,
            heir_id    TEXT
        );
        CREATE TRIGGER shared_hand_over AFTER INSERT ON shared_hand_overs BEGIN
            UPDATE shared_hand_overs SET heir_id = (
                SELECT i.session_id FROM inherited_messages AS i
                JOIN sessions AS s ON s.id = i.session_id
                WHERE i.base_id = new.session_id ORDER BY i.upto_id DESC, i.session_id LIMIT 1)
            WHERE id = new.id;
            UPDATE messages SET session_id = (SELECT heir_id FROM shared_hand_overs WHERE id = new.id)
            WHERE session_id = new.session_id AND id <= (
                SELECT i.upto_id FROM inherited_messages AS i WHERE i.session_id = (
                    SELECT heir_id FROM shared_hand_overs WHERE id = new.id));
            UPDATE inherited_messages SET base_id = (
                SELECT heir_id FROM shared_hand_overs WHERE id = new.id)
            WHERE base_id = new.session_id
              AND session_id <> (SELECT heir_id FROM shared_hand_overs WHERE id = new.id);
            UPDATE inherited_messages SET
                base_id = (SELECT b.base_id FROM inherited_messages AS b
                           WHERE b.session_id = new.session_id),
                upto_id = min(upto_id, (SELECT b.upto_id FROM inherited_messages AS b
                                        WHERE b.session_id = new.session_id))
            WHERE session_id = (SELECT heir_id FROM shared_hand_overs WHERE id = new.id)
              AND EXISTS (SELECT 1 FROM inherited_messages AS b
                          WHERE b.session_id = new.session_id);
            DELETE FROM inherited_messages WHERE base_id = new.session_id
              AND session_id = (SELECT heir_id FROM shared_hand_overs WHERE id = new.id);
        END;
        CREATE TRIGGER sessions_hand_over_shared BEFORE DELETE ON sessions
        WHEN EXISTS (SELECT 1 FROM inherited_messages WHERE base_id = old.id)
        BEGIN
            INSERT INTO shared_hand_overs (session_id) VALUES (old.id);
            DELETE FROM shared_hand_overs WHERE session_id = old.id;
        END;
        -- Every todo list a session saved, with when (a JSON list of content and status):
        -- a fork at message N gets the list as it was when N was written.
        CREATE TABLE todo_lists (
            id         INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT    NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            saved_at   REAL    NOT NULL,
            items      TEXT    NOT NULL
        );
        CREATE INDEX idx_todo_lists_session ON todo_lists(session_id, id);
        -- A hand-over moves rows to another session_id, which changes no indexed text:
        -- the search indexes' update triggers now fire only when the text does (they
        -- re-indexed every moved row, and deleting a 100,000-message origin took 8 s).
        DROP TRIGGER messages_fts_update;
        CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, tool_calls ON messages
        BEGIN
            DELETE FROM messages_fts WHERE rowid = old.id;
            INSERT INTO messages_fts (rowid, body) SELECT new.id, {_FTS_BODY_V4}
                WHERE new.id <= (SELECT indexed_upto FROM fts_state);
        END;
        DROP TRIGGER messages_cjk_update;
        CREATE TRIGGER messages_cjk_update AFTER UPDATE OF content, tool_calls ON messages
        BEGIN
            DELETE FROM messages_cjk WHERE rowid = old.id;
            INSERT INTO messages_cjk (rowid, body) SELECT new.id, {_FTS_BODY_V4}
                WHERE new.id <= (SELECT cjk_indexed_upto FROM fts_state) AND {CJK_ROW};
        END;
        """,
    ),
    (
        # The checkpoint as data (issue 20): its recall entries, stubs and state items as
        # one JSON value (harness9.store.codec details_to_json), rendered only by the view.
        # compaction_details stays: rows written before this are read from it and
        # converted on read (harness9.store.legacy_checkpoint); new rows are written here.
        # A table of its own for the reason compaction_details has one.
        "checkpoint_data_as_json",
        """
        CREATE TABLE compaction_data (
            compaction_id INTEGER PRIMARY KEY REFERENCES compactions(id) ON DELETE CASCADE,
            data          TEXT    NOT NULL   -- JSON {recall, recall_overflow, stubs, state}
        );
        """,
    ),
    (
        # A tool result stored as its offload's summary names the offload as data (issue
        # 20): its id and full size (harness9.store.codec message_values). New rows write
        # offload_id "" when not offloaded; NULL marks a row stored before this, read by
        # its summary's first line (harness9.store.legacy_offload) without a back-fill.
        "message_offload_link",
        """
        ALTER TABLE messages ADD COLUMN offload_id TEXT;
        ALTER TABLE messages ADD COLUMN offload_tokens INTEGER;
        """,
    ),
    (
        # A tool result's run facts as data (issue 33): a command's exit code and whether
        # it timed out, JSON text (harness9.store.codec metadata_to_text), so eviction's
        # summary never reads them back from the output. NULL marks a row stored before
        # this (or a message that is no tool result): readers fall back to its text.
        "message_result_metadata",
        """
        ALTER TABLE messages ADD COLUMN metadata TEXT;
        """,
    ),
    (
        # The facts a checkpoint's summary keeps, as data (issue 33): a JSON list of
        # "<kind>: <value>" (harness9.store.codec encode_facts), so the next compaction
        # never reads them back from the summary's text, which is largely harness9's own
        # (its preserved facts, the recall index, the todo state). NULL marks a checkpoint
        # stored before this: its summary's facts are read from its text.
        "checkpoint_facts",
        """
        ALTER TABLE compactions ADD COLUMN facts TEXT;
        """,
    ),
    (
        # How the server counted a session's last requests, beside the model and API base
        # they were learnt from (harness9.tokens.ServerCount's samples): a JSON list of
        # [estimate, reported input tokens] (harness9.store.codec encode_count_samples), so
        # --continue/--resume and `compact` count as chat last did. '' marks a row stored
        # before this; it reads as no samples, as a damaged value does.
        "session_count_samples",
        """
        ALTER TABLE session_settings ADD COLUMN count_samples TEXT NOT NULL DEFAULT '';
        """,
    ),
]

# The text the current schema indexes for a row aliased ``new``. A migration that changes
# what is indexed must rebuild messages_fts and point this at its own expression.
FTS_BODY = _FTS_BODY_V4

SCHEMA_VERSION = len(MIGRATIONS)

_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at REAL    NOT NULL
)
"""


class SchemaError(Exception):
    """The file is not one this code can use (foreign database, newer schema)."""


def check_version(conn: sqlite3.Connection) -> int:
    """The file's schema version; SchemaError if it is newer than this code knows."""
    (current,) = conn.execute("PRAGMA user_version").fetchone()
    if current > SCHEMA_VERSION:
        raise SchemaError(
            f"it has schema version {current} but this harness9 knows only up to "
            f"{SCHEMA_VERSION}; upgrade harness9 or point HARNESS9_HOME elsewhere"
        )
    return current


def has_fts5(conn: sqlite3.Connection) -> bool:
    """Whether this SQLite library was built with FTS5 (session search needs it)."""
    return any(opt == "ENABLE_FTS5" for (opt,) in conn.execute("PRAGMA compile_options"))


NO_FTS5 = (
    "this Python's SQLite library was built without FTS5, which session search needs; "
    "use a Python whose sqlite3 module has it (python.org, Debian and Homebrew builds do)"
)


def migrate(conn: sqlite3.Connection) -> int:
    """Bring ``conn``'s database up to SCHEMA_VERSION; return the version it had.

    ``conn`` must be in autocommit mode (isolation_level=None). BEGIN IMMEDIATE
    makes two processes opening a fresh file at once queue instead of both
    creating tables.
    """
    if not has_fts5(conn):
        # Checked on every open: every message delete fires an FTS5 trigger.
        raise SchemaError(NO_FTS5)
    (current,) = conn.execute("PRAGMA user_version").fetchone()
    if current == SCHEMA_VERSION:
        return current
    begin_immediate(conn)
    try:
        current = check_version(conn)  # re-read under the lock
        if current == 0:
            (tables,) = conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
            ).fetchone()
            if tables:
                raise SchemaError(
                    "it is an SQLite database of some other program; "
                    "move it aside or point HARNESS9_HOME elsewhere"
                )
        conn.execute(_MIGRATIONS_TABLE)
        deferred = False
        for version, (name, sql) in enumerate(MIGRATIONS, start=1):
            if version <= current:
                continue
            # executescript would COMMIT first; run the statements one by one instead.
            for statement in _statements(sql):
                if statement.endswith(_FTS_BACKFILL_V4):
                    deferred = True  # see below
                    continue
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (version, name, time.time()),
            )
            conn.execute(f"PRAGMA user_version = {version:d}")
        if deferred:
            # Migration 4's back-fill indexed a legacy store's whole history in this one
            # transaction: seconds with the write lock held on a large store. Left out, the
            # index is empty, and a mark of 0 says so (migration 5 set it to the top id,
            # taking the back-fill for done); the first search then fills it in bounded
            # steps (harness9.store.fts_index), as index_cjk_trigram's index is filled.
            # The schema is the same either way, and so is the index once caught up.
            conn.execute("UPDATE fts_state SET indexed_upto = 0")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return current


def _statements(script: str) -> list[str]:
    out: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out
