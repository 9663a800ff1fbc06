/*
 * The floor under the nginx GridFS module's CPU per request: a client of the
 * same driver (libmongoc) asking FerretDB or MongoDB the same two queries the
 * module asks for each request (the files document by filename with its
 * projection, then the chunks by files_id in n order), reading every chunk's
 * bytes and discarding them. No HTTP, no copy into buffers, no send: what is
 * left is receiving and parsing the replies, which the module cannot avoid.
 *
 *   gridfs_floor URI DB FILENAME THREADS SECONDS
 *
 * prints one line: "files N bytes B seconds S cpu_user U cpu_system Y"
 * (this process's own CPU, every thread, from getrusage). Exits 1 on any
 * error or a file whose chunks do not add up to its length.
 */

#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>


typedef struct {
    mongoc_client_pool_t  *pool;
    const char            *db;
    const char            *filename;
    double                 deadline;
    long                   files;
    long long              bytes;
    int                    failed;
} floor_worker_t;


static double
now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}


/* One request's database work: the files document, then every chunk. */
static long long
read_file(mongoc_client_t *client, const char *db, const char *filename)
{
    bson_t                filter, opts, sub;
    bson_iter_t           it;
    bson_value_t          id;
    const bson_t         *doc;
    mongoc_cursor_t      *cursor;
    mongoc_collection_t  *files, *chunks;
    long long             length = -1, got = 0;
    const uint8_t        *data;
    uint32_t              len;
    bson_subtype_t        subtype;
    bson_error_t          error;

    files = mongoc_client_get_collection(client, db, "fs.files");
    chunks = mongoc_client_get_collection(client, db, "fs.chunks");

    bson_init(&filter);
    BSON_APPEND_UTF8(&filter, "filename", filename);
    bson_init(&opts);
    BSON_APPEND_INT64(&opts, "limit", 1);
    BSON_APPEND_BOOL(&opts, "singleBatch", true);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &sub);
    BSON_APPEND_INT32(&sub, "_id", 1);
    BSON_APPEND_INT32(&sub, "length", 1);
    BSON_APPEND_INT32(&sub, "chunkSize", 1);
    BSON_APPEND_INT32(&sub, "uploadDate", 1);
    BSON_APPEND_INT32(&sub, "md5", 1);
    BSON_APPEND_INT32(&sub, "contentType", 1);
    BSON_APPEND_INT32(&sub, "metadata.contentType", 1);
    BSON_APPEND_INT32(&sub, "filename", 1);
    bson_append_document_end(&opts, &sub);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sub);
    BSON_APPEND_INT32(&sub, "uploadDate", -1);
    bson_append_document_end(&opts, &sub);

    cursor = mongoc_collection_find_with_opts(files, &filter, &opts, NULL);
    id.value_type = BSON_TYPE_EOD;
    if (mongoc_cursor_next(cursor, &doc)) {
        if (bson_iter_init_find(&it, doc, "_id")) {
            bson_value_copy(bson_iter_value(&it), &id);
        }
        if (bson_iter_init_find(&it, doc, "length") && BSON_ITER_HOLDS_NUMBER(&it)) {
            length = bson_iter_as_int64(&it);
        }
    }
    if (mongoc_cursor_error(cursor, &error)) {
        fprintf(stderr, "files: %s\n", error.message);
        length = -1;
    }
    mongoc_cursor_destroy(cursor);
    bson_destroy(&filter);
    bson_destroy(&opts);

    if (length >= 0 && id.value_type != BSON_TYPE_EOD) {
        bson_init(&filter);
        BSON_APPEND_VALUE(&filter, "files_id", &id);
        bson_init(&opts);
        BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sub);
        BSON_APPEND_INT32(&sub, "n", 1);
        bson_append_document_end(&opts, &sub);

        cursor = mongoc_collection_find_with_opts(chunks, &filter, &opts, NULL);
        while (mongoc_cursor_next(cursor, &doc)) {
            if (bson_iter_init_find(&it, doc, "data") && BSON_ITER_HOLDS_BINARY(&it)) {
                bson_iter_binary(&it, &subtype, &len, &data);
                got += len;
            }
        }
        if (mongoc_cursor_error(cursor, &error)) {
            fprintf(stderr, "chunks: %s\n", error.message);
            got = -1;
        }
        mongoc_cursor_destroy(cursor);
        bson_destroy(&filter);
        bson_destroy(&opts);
    }

    if (id.value_type != BSON_TYPE_EOD) {
        bson_value_destroy(&id);
    }
    mongoc_collection_destroy(files);
    mongoc_collection_destroy(chunks);

    return (length >= 0 && got == length) ? got : -1;
}


static void *
worker(void *arg)
{
    floor_worker_t   *w = arg;
    mongoc_client_t  *client;
    long long         got;

    while (now() < w->deadline && !w->failed) {
        client = mongoc_client_pool_pop(w->pool);
        got = read_file(client, w->db, w->filename);
        mongoc_client_pool_push(w->pool, client);
        if (got < 0) {
            w->failed = 1;
            break;
        }
        w->files++;
        w->bytes += got;
    }
    return NULL;
}


int
main(int argc, char **argv)
{
    int                    threads, i, failed = 0;
    long                   files = 0;
    long long              bytes = 0;
    double                 seconds, began;
    pthread_t             *ids;
    floor_worker_t        *workers;
    mongoc_uri_t          *uri;
    mongoc_client_pool_t  *pool;
    struct rusage          before, after;
    bson_error_t           error;

    if (argc != 6) {
        fprintf(stderr, "usage: %s URI DB FILENAME THREADS SECONDS\n", argv[0]);
        return 2;
    }
    threads = atoi(argv[4]);
    seconds = atof(argv[5]);
    if (threads < 1 || threads > 256 || seconds <= 0) {
        fprintf(stderr, "THREADS from 1 to 256, SECONDS above 0\n");
        return 2;
    }

    mongoc_init();
    uri = mongoc_uri_new_with_error(argv[1], &error);
    if (uri == NULL) {
        fprintf(stderr, "URI: %s\n", error.message);
        return 2;
    }
    pool = mongoc_client_pool_new(uri);
    mongoc_client_pool_max_size(pool, threads);

    ids = calloc(threads, sizeof(pthread_t));
    workers = calloc(threads, sizeof(floor_worker_t));

    /* one file first, so connecting is not counted */
    {
        mongoc_client_t  *client = mongoc_client_pool_pop(pool);

        if (read_file(client, argv[2], argv[3]) < 0) {
            fprintf(stderr, "%s: not read whole\n", argv[3]);
            return 1;
        }
        mongoc_client_pool_push(pool, client);
    }

    getrusage(RUSAGE_SELF, &before);
    began = now();
    for (i = 0; i < threads; i++) {
        workers[i] = (floor_worker_t) { pool, argv[2], argv[3], began + seconds, 0, 0, 0 };
        pthread_create(&ids[i], NULL, worker, &workers[i]);
    }
    for (i = 0; i < threads; i++) {
        pthread_join(ids[i], NULL);
        files += workers[i].files;
        bytes += workers[i].bytes;
        failed |= workers[i].failed;
    }
    seconds = now() - began;
    getrusage(RUSAGE_SELF, &after);

    printf("files %ld bytes %lld seconds %.6f cpu_user %.6f cpu_system %.6f\n", files, bytes, seconds,
           (after.ru_utime.tv_sec - before.ru_utime.tv_sec)
           + (after.ru_utime.tv_usec - before.ru_utime.tv_usec) / 1e6,
           (after.ru_stime.tv_sec - before.ru_stime.tv_sec)
           + (after.ru_stime.tv_usec - before.ru_stime.tv_usec) / 1e6);

    mongoc_client_pool_destroy(pool);
    mongoc_uri_destroy(uri);
    mongoc_cleanup();
    free(ids);
    free(workers);
    return failed ? 1 : 0;
}
