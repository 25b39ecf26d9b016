"""Human-labeled data: the Example schema, validating readers, the catalog of sources, splits."""

from judgetune.datasets._catalog import (
                                         CATALOG,
                                         Source,
                                         data_dir,
                                         data_fingerprint,
                                         ensure_fetched,
                                         fetch,
                                         get_source,
                                         load,
                                         load_data,
                                         summary,
)
from judgetune.datasets._json import (
                                         MAX_DEPTH,
                                         MAX_FILE_BYTES,
                                         JSONShapeError,
                                         ascii_number,
                                         parse_json,
                                         read_json,
                                         strict_loads,
)
from judgetune.datasets._mapping import MAPPABLE, FieldMap
from judgetune.datasets._rag import RagItem, read_rag_items
from judgetune.datasets._readers import (
                                         MAX_ROW_BYTES,
                                         delimiter_hint,
                                         example_from_record,
                                         jsonl_rows,
                                         read_examples,
                                         read_labeled,
                                         write_examples,
)
from judgetune.datasets._schema import Example, ExampleRow, Reference, Scale, parse_scale
from judgetune.datasets._sources import clef_judgments, clef_top1_rows, generated_answer_llm, read_clef_topics
from judgetune.datasets._splits import (
                                         fold_of,
                                         group_folds,
                                         groups_of,
                                         limit_by_group,
                                         sample_per_group,
                                         split_by_group,
                                         split_examples,
)
from judgetune.datasets._stream import STREAM_FORMATS, iter_examples, iter_records, parquet_module, stream_format
from judgetune.datasets._validation import Cell, describe, expected, location, problems_from, unwritable

__all__ = ["CATALOG", "JSONShapeError", "MAPPABLE", "MAX_DEPTH", "MAX_FILE_BYTES", "MAX_ROW_BYTES", "Cell", "Example",
           "ExampleRow",
           "FieldMap", "RagItem", "Reference", "Scale", "Source", "ascii_number", "clef_judgments",
           "clef_top1_rows", "data_dir", "data_fingerprint", "delimiter_hint", "describe", "ensure_fetched",
           "example_from_record", "expected", "fetch", "generated_answer_llm", "get_source", "fold_of", "group_folds",
           "groups_of",
           "jsonl_rows", "limit_by_group", "load", "load_data", "location", "parse_json", "parse_scale", "problems_from",
           "read_clef_topics", "read_examples", "read_json", "read_labeled", "read_rag_items", "sample_per_group",
           "split_by_group", "split_examples", "strict_loads", "summary", "unwritable", "write_examples",
           # streaming reads (judgetune score)
           "STREAM_FORMATS", "iter_examples", "iter_records", "parquet_module", "stream_format"]
