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
from judgetune.datasets._rag import RagItem, read_rag_items
from judgetune.datasets._readers import read_examples, write_examples
from judgetune.datasets._schema import Example, Reference, Scale
from judgetune.datasets._splits import split_by_group, split_examples

__all__ = ["CATALOG", "Example", "RagItem", "Reference", "Scale", "Source", "data_dir", "data_fingerprint",
           "ensure_fetched", "fetch", "get_source", "load", "load_data", "read_examples", "read_rag_items",
           "split_by_group", "split_examples", "summary", "write_examples"]
