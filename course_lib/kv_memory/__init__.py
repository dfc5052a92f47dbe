"""KV-cache memory: the formula, real model geometries, capacity planning and paging.

>>> kv_cache_bytes(96, 96, 128, 4096)           # GPT-3-class, fp16, one 4,096-token sequence
19327352832
>>> get_geometry("mistral-7b").kv_bytes_per_token("fp16") // 1024
128
"""
from course_lib.kv_memory.accelerators import ACCELERATORS, Accelerator, get_accelerator
from course_lib.kv_memory.append_cache import LayerKVCache
from course_lib.kv_memory.capacity import CapacityPlan, max_concurrent_sequences, plan_capacity
from course_lib.kv_memory.dtypes import ELEMENT_BYTES, bytes_per_element, canonical_dtype
from course_lib.kv_memory.formula import GB, GIB, KIB, MIB, format_bytes, kv_bytes_per_token, kv_cache_bytes
from course_lib.kv_memory.geometries import MODEL_GEOMETRIES, ModelGeometry, geometry_table, get_geometry
from course_lib.kv_memory.paging import PagingComparison, blocks_needed, compare_paging

__all__ = [
    "ACCELERATORS", "Accelerator", "CapacityPlan", "LayerKVCache", "ELEMENT_BYTES", "GB", "GIB", "KIB", "MIB",
    "MODEL_GEOMETRIES", "ModelGeometry", "PagingComparison", "blocks_needed", "bytes_per_element",
    "canonical_dtype", "compare_paging", "format_bytes", "geometry_table", "get_accelerator",
    "get_geometry", "kv_bytes_per_token", "kv_cache_bytes", "max_concurrent_sequences",
    "plan_capacity",
]
