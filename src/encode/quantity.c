/* quantity.c: not written yet (placeholder so the stage library links). */
typedef int cma_placeholder_quantity;
