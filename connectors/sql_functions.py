"""Which functions ``sql_query`` may call: an allowlist per dialect, and refusals with reasons.

``connectors/sql_policy.py`` applies these lists to every ``name(`` in a statement. A name
on the allowlist of the connection's dialect is a built-in that only computes a value from
its arguments or reads what the role may read anyway. Everything else is refused: a
function this module does not know (an extension's, a user-defined one, a new built-in)
may have effects no read-only transaction stops, such as ``dblink_exec`` opening a second,
writable transaction, ``http_get`` calling out of the network, or ``pg_terminate_backend``
signalling another session. An admin can allow more functions with the connector's
``read_functions`` setting; the refusals below (``DENIED`` and ``DENIED_PREFIXES``) cannot
be allowed, because what they do is the point of refusing them.
"""

from __future__ import annotations

from collections.abc import Mapping

# Names refused on every dialect, with what they do; the model reads the reason.
DENIED: Mapping[str, str] = {
    # PostgreSQL: other sessions and the server.
    "pg_terminate_backend": "terminates another session",
    "pg_cancel_backend": "cancels another session's query",
    "pg_reload_conf": "reloads the server configuration",
    "pg_rotate_logfile": "rotates the server log",
    "pg_promote": "promotes a standby server",
    "pg_log_backend_memory_contexts": "makes another session write to the server log",
    "pg_switch_wal": "forces a WAL switch",
    "pg_checkpoint": "forces a checkpoint",
    "set_config": "changes a setting of the session",
    "setseed": "changes the session's random seed",
    "nextval": "advances a sequence (a write no rollback undoes)",
    "setval": "sets a sequence",
    "pg_sleep": "holds the connection idle (denial of service)",
    "pg_sleep_for": "holds the connection idle (denial of service)",
    "pg_sleep_until": "holds the connection idle (denial of service)",
    "pg_current_xact_id": "assigns a transaction id",
    "pg_notify": "sends a notification to other sessions",
    "pg_read_file": "reads a file on the database host",
    "pg_read_binary_file": "reads a file on the database host",
    "pg_stat_file": "inspects a file on the database host",
    "pg_import_system_collations": "creates collations",
    "loread": "reads a large object by descriptor",
    "lowrite": "writes a large object",
    # Functions that run SQL given as text: the text would escape this check.
    "query_to_xml": "runs the SQL text it is given",
    "query_to_xmlschema": "runs the SQL text it is given",
    "query_to_xml_and_xmlschema": "runs the SQL text it is given",
    "cursor_to_xml": "reads from a cursor",
    "cursor_to_xmlschema": "reads from a cursor",
    "ts_stat": "runs the SQL text it is given",
    "ts_rewrite": "can run the SQL text it is given",
    "brin_summarize_new_values": "writes to an index",
    "brin_summarize_range": "writes to an index",
    "brin_desummarize_range": "writes to an index",
    "gin_clean_pending_list": "writes to an index",
    # MySQL / MariaDB.
    "load_file": "reads a file on the database host",
    "sleep": "holds the connection idle (denial of service)",
    "benchmark": "burns server CPU (denial of service)",
    "get_lock": "takes a named lock that outlives the query",
    "release_lock": "releases a named lock",
    "release_all_locks": "releases named locks",
    "is_free_lock": "probes named locks",
    "is_used_lock": "probes named locks",
    "master_pos_wait": "waits on replication (denial of service)",
    "source_pos_wait": "waits on replication (denial of service)",
    "wait_for_executed_gtid_set": "waits on replication (denial of service)",
    "wait_until_sql_thread_after_gtids": "waits on replication (denial of service)",
    "last_insert_id": "with an argument, sets a value of the session",
    "sys_exec": "runs a program on the database host",
    "sys_eval": "runs a program on the database host",
    # SQLite.
    "load_extension": "loads native code into the database process",
    "fts3_tokenizer": "registers native tokenizer code",
    "readfile": "reads a file",
    "writefile": "writes a file",
    "edit": "starts an editor",
}

DENIED_PREFIXES: tuple[tuple[str, str], ...] = (
    ("pg_advisory_", "takes an advisory lock that outlives the query"),
    ("pg_try_advisory_", "takes an advisory lock that outlives the query"),
    ("dblink", "connects to a database and runs SQL there, outside the read-only transaction"),
    ("lo_", "reads or writes large objects or server files (lo_import, lo_export)"),
    ("pg_ls_", "lists directories on the database host"),
    ("txid_", "assigns or reads transaction ids"),
    ("pg_logical_", "reads or writes logical replication messages"),
    ("pg_replication_", "manages replication"),
    ("pg_create_", "creates replication slots or restore points"),
    ("pg_drop_", "drops replication slots"),
    ("pg_copy_", "copies replication slots"),
    ("pg_stat_reset", "resets the server's statistics"),
    ("pg_backup_", "starts or stops a backup"),
    ("pg_wal_replay_", "pauses or resumes replay"),
    ("pg_file_", "writes or renames server files"),
    ("table_to_xml", "runs SQL built from its arguments"),
    ("schema_to_xml", "runs SQL built from its arguments"),
    ("database_to_xml", "runs SQL built from its arguments"),
    ("binary_upgrade_", "changes catalogs for pg_upgrade"),
)

# Words of SQL's grammar that may stand before "(" without calling a function.
GRAMMAR_WORDS = frozenset(
    {
        "select", "from", "where", "and", "or", "not", "in", "exists", "any", "all", "some",
        "as", "on", "using", "join", "lateral", "values", "union", "intersect", "except",
        "over", "filter", "group", "by", "partition", "order", "having", "with", "materialized",
        "case", "when", "then", "else", "is", "like", "ilike", "similar", "to", "between",
        "escape", "distinct", "array", "row", "rollup", "cube", "sets", "grouping",
        "tablesample", "system", "bernoulli", "repeatable", "limit", "offset", "first", "next",
        "columns", "key", "index", "only", "of", "zone", "against",
    }
)  # fmt: skip

# Types written with parameters, e.g. CAST(x AS numeric(10, 2)).
TYPE_WORDS = frozenset(
    {
        "numeric", "decimal", "dec", "varchar", "char", "character", "varying", "nchar",
        "nvarchar", "bit", "varbit", "float", "double", "real", "time", "timestamp",
        "timestamptz", "timetz", "interval", "datetime", "int", "integer", "tinyint",
        "smallint", "mediumint", "bigint", "binary", "varbinary", "text", "blob", "signed",
        "unsigned", "precision",
    }
)  # fmt: skip

# Computations every dialect shares (standard SQL, and names the three have in common).
_COMMON = frozenset(
    {
        # aggregates and windows
        "count", "sum", "avg", "min", "max", "stddev", "stddev_pop", "stddev_samp", "variance",
        "var_pop", "var_samp", "row_number", "rank", "dense_rank", "percent_rank", "cume_dist",
        "ntile", "lag", "lead", "first_value", "last_value", "nth_value", "bit_and", "bit_or",
        "bit_xor", "json_arrayagg", "json_objectagg",
        # conditionals and casts
        "coalesce", "nullif", "greatest", "least", "cast", "extract", "position", "substring",
        "trim", "overlay", "convert",
        # strings
        "lower", "upper", "length", "char_length", "character_length", "octet_length",
        "bit_length", "concat", "concat_ws", "left", "right", "lpad", "rpad", "ltrim", "rtrim",
        "replace", "repeat", "reverse", "substr", "instr", "ascii", "char", "chr", "format",
        "md5", "hex", "unhex", "soundex", "space", "strcmp", "translate", "regexp_replace",
        "regexp_like", "regexp_instr", "regexp_substr", "regexp_count", "initcap", "quote",
        "unicode", "printf", "sha1", "sha2",
        # numbers
        "abs", "ceil", "ceiling", "floor", "round", "trunc", "truncate", "sign", "sqrt", "exp",
        "ln", "log", "log10", "log2", "mod", "pi", "pow", "power", "radians", "degrees", "sin",
        "cos", "tan", "asin", "acos", "atan", "atan2", "cot", "sinh", "cosh", "tanh", "asinh",
        "acosh", "atanh", "random", "rand", "div",
        # dates
        "now", "current_date", "current_time", "current_timestamp", "localtime",
        "localtimestamp", "date", "time", "datetime", "timestamp", "year", "month", "day",
        "hour", "minute", "second", "quarter", "week",
        # JSON
        "json_array", "json_object", "json_extract", "json_type", "json_valid", "json_quote",
        "json_set", "json_insert", "json_replace", "json_remove", "json_array_length",
        # the session, read-only
        "current_user", "session_user", "user", "version", "database", "schema",
        # row constructors
        "row",
    }
)  # fmt: skip

_POSTGRES = frozenset(
    {
        # aggregates, windows, ordered sets
        "array_agg", "string_agg", "json_agg", "jsonb_agg", "json_object_agg",
        "jsonb_object_agg", "json_agg_strict", "jsonb_agg_strict", "bool_and", "bool_or",
        "every", "corr", "covar_pop", "covar_samp", "regr_avgx", "regr_avgy", "regr_count",
        "regr_intercept", "regr_r2", "regr_slope", "regr_sxx", "regr_sxy", "regr_syy",
        "percentile_cont", "percentile_disc", "mode", "xmlagg", "range_agg",
        "range_intersect_agg", "any_value", "grouping",
        # strings and bytes
        "btrim", "split_part", "strpos", "starts_with", "string_to_array", "string_to_table",
        "regexp_match", "regexp_matches", "regexp_split_to_array", "regexp_split_to_table",
        "quote_ident", "quote_literal", "quote_nullable", "to_hex", "to_bin", "to_oct",
        "to_ascii", "encode", "decode", "convert_from", "convert_to", "get_bit", "get_byte",
        "set_bit", "set_byte", "sha224", "sha256", "sha384", "sha512", "crc32", "crc32c",
        "normalize", "casefold", "unistr", "parse_ident", "bit_count", "textlen",
        "similar_to_escape",
        # numbers
        "cbrt", "factorial", "gcd", "lcm", "min_scale", "scale", "trim_scale", "width_bucket",
        "random_normal", "acosd", "asind", "atand", "atan2d", "cosd", "cotd", "sind", "tand",
        "erf", "erfc", "num_nulls", "num_nonnulls",
        # formatting
        "to_char", "to_date", "to_number", "to_timestamp",
        # dates and times
        "age", "clock_timestamp", "date_add", "date_bin", "date_part", "date_subtract",
        "date_trunc", "isfinite", "justify_days", "justify_hours", "justify_interval",
        "make_date", "make_interval", "make_time", "make_timestamp", "make_timestamptz",
        "statement_timestamp", "timeofday", "transaction_timestamp", "timezone",
        # enums, ranges, geometry, networks
        "enum_first", "enum_last", "enum_range", "isempty", "lower_inc", "upper_inc",
        "lower_inf", "upper_inf", "range_merge", "multirange", "int4range", "int8range",
        "numrange", "tsrange", "tstzrange", "daterange", "int4multirange", "int8multirange",
        "nummultirange", "tsmultirange", "tstzmultirange", "datemultirange", "area", "center",
        "diameter", "height", "isclosed", "isopen", "npoints", "pclose", "popen", "radius",
        "slope", "width", "box", "circle", "line", "lseg", "path", "point", "polygon",
        "bound_box", "abbrev", "broadcast", "family", "host", "hostmask", "inet_merge",
        "inet_same_family", "masklen", "netmask", "network", "set_masklen", "macaddr8_set7bit",
        "text",
        # text search
        "to_tsvector", "to_tsquery", "plainto_tsquery", "phraseto_tsquery",
        "websearch_to_tsquery", "json_to_tsvector", "jsonb_to_tsvector", "ts_rank",
        "ts_rank_cd", "ts_headline", "setweight", "strip", "numnode", "querytree", "ts_delete",
        "ts_filter", "tsvector_to_array", "array_to_tsvector", "get_current_ts_config",
        "ts_lexize", "ts_parse", "ts_token_type", "ts_debug", "tsquery_phrase",
        # UUIDs
        "gen_random_uuid", "uuid_extract_timestamp", "uuid_extract_version", "uuidv4", "uuidv7",
        # XML (xpath evaluates XPath on a value; it runs no SQL)
        "xmlcomment", "xmlconcat", "xmlelement", "xmlforest", "xmlpi", "xmlroot", "xmlexists",
        "xml_is_well_formed", "xml_is_well_formed_document", "xml_is_well_formed_content",
        "xpath", "xpath_exists", "xmlparse", "xmlserialize", "xmltable", "xmltext",
        "xmlattributes",
        # JSON
        "to_json", "to_jsonb", "array_to_json", "row_to_json", "json_build_array",
        "jsonb_build_array", "json_build_object", "jsonb_build_object", "jsonb_object",
        "json_array_elements", "jsonb_array_elements", "json_array_elements_text",
        "jsonb_array_elements_text", "jsonb_array_length", "json_each", "jsonb_each",
        "json_each_text", "jsonb_each_text", "json_extract_path", "jsonb_extract_path",
        "json_extract_path_text", "jsonb_extract_path_text", "json_object_keys",
        "jsonb_object_keys", "json_populate_record", "jsonb_populate_record",
        "jsonb_populate_record_valid", "json_populate_recordset", "jsonb_populate_recordset",
        "json_to_record", "jsonb_to_record", "json_to_recordset", "jsonb_to_recordset",
        "json_strip_nulls", "jsonb_strip_nulls", "jsonb_set", "jsonb_set_lax", "jsonb_insert",
        "jsonb_path_exists", "jsonb_path_match", "jsonb_path_query", "jsonb_path_query_array",
        "jsonb_path_query_first", "jsonb_path_exists_tz", "jsonb_path_match_tz",
        "jsonb_path_query_tz", "jsonb_path_query_array_tz", "jsonb_path_query_first_tz",
        "jsonb_pretty", "json_typeof", "jsonb_typeof", "json_scalar", "json_serialize",
        "json_exists", "json_query", "json_value", "json_table",
        # arrays and set-returning functions
        "array_append", "array_cat", "array_dims", "array_fill", "array_length", "array_lower",
        "array_ndims", "array_position", "array_positions", "array_prepend", "array_remove",
        "array_replace", "array_sample", "array_shuffle", "array_to_string", "array_upper",
        "array_reverse", "array_sort", "cardinality", "trim_array", "unnest", "generate_series",
        "generate_subscripts",
        # the session and the catalogs, read-only
        "current_catalog", "current_database", "current_query", "current_role",
        "current_schema", "current_schemas", "current_setting", "system_user",
        "inet_client_addr", "inet_client_port", "inet_server_addr", "inet_server_port",
        "pg_backend_pid", "pg_blocking_pids", "pg_safe_snapshot_blocking_pids",
        "pg_conf_load_time", "pg_postmaster_start_time", "pg_my_temp_schema",
        "pg_is_other_temp_schema", "pg_jit_available", "pg_listening_channels",
        "pg_notification_queue_usage", "pg_trigger_depth", "pg_is_in_recovery",
        "pg_current_snapshot", "pg_snapshot_xmin", "pg_snapshot_xmax", "pg_snapshot_xip",
        "pg_visible_in_snapshot", "pg_current_wal_lsn", "pg_current_wal_insert_lsn",
        "pg_current_wal_flush_lsn", "pg_last_wal_receive_lsn", "pg_last_wal_replay_lsn",
        "pg_last_xact_replay_timestamp", "pg_wal_lsn_diff", "pg_get_wal_replay_pause_state",
        "has_any_column_privilege", "has_column_privilege", "has_database_privilege",
        "has_foreign_data_wrapper_privilege", "has_function_privilege",
        "has_language_privilege", "has_parameter_privilege", "has_schema_privilege",
        "has_sequence_privilege", "has_server_privilege", "has_table_privilege",
        "has_tablespace_privilege", "has_type_privilege", "pg_has_role", "row_security_active",
        "acldefault", "aclexplode", "makeaclitem", "pg_collation_is_visible",
        "pg_conversion_is_visible", "pg_function_is_visible", "pg_opclass_is_visible",
        "pg_operator_is_visible", "pg_opfamily_is_visible", "pg_statistics_obj_is_visible",
        "pg_table_is_visible", "pg_ts_config_is_visible", "pg_ts_dict_is_visible",
        "pg_ts_parser_is_visible", "pg_ts_template_is_visible", "pg_type_is_visible",
        "format_type", "pg_basetype", "pg_char_to_encoding", "pg_encoding_to_char",
        "pg_get_catalog_foreign_keys", "pg_get_constraintdef", "pg_get_expr",
        "pg_get_functiondef", "pg_get_function_arguments", "pg_get_function_identity_arguments",
        "pg_get_function_result", "pg_get_indexdef", "pg_get_keywords", "pg_get_partkeydef",
        "pg_get_ruledef", "pg_get_serial_sequence", "pg_get_statisticsobjdef",
        "pg_get_triggerdef", "pg_get_userbyid", "pg_get_viewdef",
        "pg_index_column_has_property", "pg_index_has_property", "pg_indexam_has_property",
        "pg_options_to_table", "pg_settings_get_flags", "pg_tablespace_databases",
        "pg_tablespace_location", "pg_typeof", "pg_column_size", "pg_column_compression",
        "pg_database_size", "pg_indexes_size", "pg_relation_size", "pg_size_bytes",
        "pg_size_pretty", "pg_table_size", "pg_tablespace_size", "pg_total_relation_size",
        "pg_relation_filenode", "pg_relation_filepath", "pg_filenode_relation",
        "pg_describe_object", "pg_identify_object", "pg_identify_object_as_address",
        "pg_get_object_address", "pg_input_is_valid", "pg_input_error_info",
        "pg_partition_tree", "pg_partition_ancestors", "pg_partition_root", "to_regclass",
        "to_regcollation", "to_regnamespace", "to_regoper", "to_regoperator", "to_regproc",
        "to_regprocedure", "to_regrole", "to_regtype", "to_regtypemod", "obj_description",
        "col_description", "shobj_description",
        # widely installed extensions whose functions only compute
        "similarity", "word_similarity", "strict_word_similarity", "show_trgm", "unaccent",
        "levenshtein", "levenshtein_less_equal", "metaphone", "dmetaphone", "dmetaphone_alt",
        "difference", "digest", "hmac",
    }
)  # fmt: skip

_MYSQL = frozenset(
    {
        # aggregates
        "group_concat", "std", "any_value", "grouping", "json_arrayagg", "json_objectagg",
        # control flow and strings
        "if", "ifnull", "isnull", "bin", "elt", "export_set", "field", "find_in_set",
        "from_base64", "to_base64", "insert", "lcase", "ucase", "locate", "make_set", "mid",
        "oct", "ord", "substring_index", "weight_string", "regexp", "charset", "coercibility",
        "collation", "compress", "uncompress", "uncompressed_length", "sha", "crc32", "conv",
        "aes_encrypt", "aes_decrypt", "random_bytes", "match",
        # dates
        "adddate", "addtime", "convert_tz", "curdate", "curtime", "date_add", "date_format",
        "date_sub", "datediff", "dayname", "dayofmonth", "dayofweek", "dayofyear", "from_days",
        "from_unixtime", "get_format", "last_day", "makedate", "maketime", "microsecond",
        "monthname", "period_add", "period_diff", "sec_to_time", "str_to_date", "subdate",
        "subtime", "sysdate", "time_format", "time_to_sec", "timediff", "timestampadd",
        "timestampdiff", "to_days", "to_seconds", "unix_timestamp", "utc_date", "utc_time",
        "utc_timestamp", "weekday", "weekofyear", "yearweek",
        # JSON
        "json_array_append", "json_array_insert", "json_contains", "json_contains_path",
        "json_depth", "json_keys", "json_length", "json_merge", "json_merge_patch",
        "json_merge_preserve", "json_overlaps", "json_pretty", "json_schema_valid",
        "json_schema_validation_report", "json_search", "json_storage_free",
        "json_storage_size", "json_table", "json_unquote", "json_value",
        # the session, read-only
        "connection_id", "current_role", "found_rows", "row_count", "system_user",
        "icu_version", "roles_graphml",
        # values
        "uuid", "uuid_short", "uuid_to_bin", "bin_to_uuid", "is_uuid", "inet_aton", "inet_ntoa",
        "inet6_aton", "inet6_ntoa", "is_ipv4", "is_ipv6", "is_ipv4_compat", "is_ipv4_mapped",
        "format_bytes", "format_pico_time", "interval",
    }
)  # fmt: skip

_SQLITE = frozenset(
    {
        "changes", "glob", "ifnull", "iif", "if", "last_insert_rowid", "likelihood", "likely",
        "unlikely", "randomblob", "sqlite_compileoption_get", "sqlite_compileoption_used",
        "sqlite_source_id", "sqlite_version", "total_changes", "typeof", "zeroblob", "unistr",
        "unistr_quote", "group_concat", "string_agg", "total", "julianday", "unixepoch",
        "strftime", "timediff", "median", "percentile", "percentile_cont", "percentile_disc",
        "json", "jsonb", "json_error_position", "json_patch", "json_pretty", "json_group_array",
        "json_group_object", "jsonb_group_array", "jsonb_group_object", "json_each",
        "json_tree", "jsonb_array", "jsonb_object", "jsonb_extract", "jsonb_insert",
        "jsonb_patch", "jsonb_remove", "jsonb_replace", "jsonb_set", "generate_series",
        # Table-valued read PRAGMAs; the authorizer still decides what they may read.
        "pragma_table_info", "pragma_table_xinfo", "pragma_index_list", "pragma_index_info",
        "pragma_index_xinfo", "pragma_foreign_key_list", "pragma_table_list",
        "pragma_database_list", "pragma_collation_list", "pragma_function_list",
        "pragma_module_list", "pragma_pragma_list", "pragma_compile_options",
    }
)  # fmt: skip

READ_FUNCTIONS: Mapping[str, frozenset[str]] = {
    "postgres": _COMMON | _POSTGRES,
    "mysql": _COMMON | _MYSQL,
    "sqlite": _COMMON | _SQLITE,
}


def refusal(name: str) -> str | None:
    """Why the function ``name`` (lower case, unqualified) is refused, or None."""
    reason = DENIED.get(name)
    if reason is not None:
        return reason
    for prefix, why in DENIED_PREFIXES:
        if name.startswith(prefix):
            return why
    return None


__all__ = ["DENIED", "DENIED_PREFIXES", "GRAMMAR_WORDS", "READ_FUNCTIONS", "TYPE_WORDS", "refusal"]
