/*
 * http_prep.c - image preprocessing off the event loop.
 *
 * Decoding an image takes from a millisecond (a phone photo) to a second or two (a
 * 179-megapixel JPEG, the largest PIL and so inferd take). On the HTTP thread that
 * would hold up every other connection of its event loop, /ping included, for as long.
 * So each HTTP thread has a preprocessing thread ("inferd-prep"): the loop copies a
 * prediction's image bytes into the job (the request's own memory may go away with an
 * HTTP/2 stream reset while the image decodes), queues the job here and goes on; this
 * thread decodes it into the job's input slot and submits it to the model's scheduler.
 * An image that cannot be decoded, or a scheduler that refuses the job (queue full,
 * draining), sends the job back to the loop through its done queue, as a worker does,
 * with the status to answer (job->prep_failed); the loop answers 400 / 503 then.
 *
 * The queue is FIFO between one loop and its thread, under a mutex only those two take
 * (no lock shared by loops), and bounded per model: a prediction is refused (503 +
 * Retry-After, as for a full scheduler queue) when job_queue_size of its model's
 * already wait for or are in their decode, on any HTTP thread (model->decoding, an
 * atomic count: the loop adds one before the push, this thread takes it off when the
 * decode is over). So what decoding holds (the body, its copy, the 602 KB input slot)
 * stays bounded as the scheduler's queue bounds the rest, and one model's burst of
 * large images does not get another model's predictions refused. Jobs count in the
 * server's in_flight from the moment they are queued, and wait with their deadline and
 * dispose hook on the loop
 * (http__job_wait) as queued jobs do: a client that leaves or times out while its
 * image waits or decodes cancels the job, which this thread then hands back without
 * decoding it or, seen after the decode, without submitting it; a cancel in the
 * instant between that check and the submit is kept by the scheduler, which skips the
 * job. A drain (SIGTERM) answers the jobs taken in before it: they are decoded and
 * submitted, and the scheduler, which runs until the drain has no request in flight,
 * answers them; only when the models themselves are stopped does it refuse them (503).
 *
 * Threading: http__prep_start / push / stop on the loop thread; everything else on the
 * preprocessing thread, which reads what the loop wrote before the push (image, model,
 * deadline, the cancelled flag, atomically) and writes the job's input, scheduler
 * request, code, message and prep_failed, never job->req. http__prep_stop joins the
 * thread, so nothing of it runs after the loop stopped it (the loop does so before its
 * models can go away).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "http/http_internal.h"

struct http__prep {
  http__loop *loop;
  handler_image_ctx *image; /* this thread's decoding buffers */
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  http__job *head, *tail; /* queued, by job->next_prep; under lock */
  bool stop;              /* under lock */
};

/* Decodes `job`'s image and submits it; on failure hands it back to the loop. */
static void prepare(http__prep *p, http__job *job) {
  inferd_status st = {0};
  inferd_code code;
  if (atomic_load(&job->request.cancelled) || core_now_seconds() >= job->deadline)
    code = core_fail(&st, INFERD_TIMEOUT, "cancelled before its image was decoded");
  else
    code = handler_image_preprocess(p->image, job->image, job->image_len, job->input, NULL, &st);
  atomic_fetch_sub(&job->model->decoding, 1);
  if (code == INFERD_OK && atomic_load(&job->request.cancelled))
    code = core_fail(&st, INFERD_TIMEOUT, "cancelled while its image was decoded");
  if (code == INFERD_OK) {
    metrics_model_ts_request(job->model->metrics);
    code = http__job_submit(job, &st);
    if (code == INFERD_OK) return; /* the scheduler's now, back through on_done */
  }
  job->code = code;
  job->request.status = st;
  job->prep_failed = true;
  job->message = (h2o_multithread_message_t){{NULL, NULL}};
  h2o_multithread_send_message(&p->loop->done_receiver, &job->message);
}

static void *prep_main(void *arg) {
  http__prep *p = arg;
  pthread_setname_np(pthread_self(), "inferd-prep");
  pthread_mutex_lock(&p->lock);
  for (;;) {
    while (!p->head && !p->stop) pthread_cond_wait(&p->wake, &p->lock);
    if (p->stop) break;
    http__job *job = p->head;
    p->head = job->next_prep;
    if (!p->head) p->tail = NULL;
    pthread_mutex_unlock(&p->lock);
    prepare(p, job);
    pthread_mutex_lock(&p->lock);
  }
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

http__prep *http__prep_start(http__loop *loop, const handler_image_params *params) {
  http__prep *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->loop = loop;
  p->image = handler_image_ctx_new(params);
  if (!p->image) {
    free(p);
    return NULL;
  }
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->wake, NULL);
  if (pthread_create(&p->thread, NULL, prep_main, p) != 0) {
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    handler_image_ctx_free(p->image);
    free(p);
    return NULL;
  }
  return p;
}

void http__prep_push(http__prep *p, http__job *job) {
  job->next_prep = NULL;
  pthread_mutex_lock(&p->lock);
  if (p->tail)
    p->tail->next_prep = job;
  else
    p->head = job;
  p->tail = job;
  pthread_cond_signal(&p->wake);
  pthread_mutex_unlock(&p->lock);
}

http__job *http__prep_stop(http__prep *p) {
  if (!p) return NULL;
  pthread_mutex_lock(&p->lock);
  p->stop = true;
  pthread_cond_signal(&p->wake);
  pthread_mutex_unlock(&p->lock);
  pthread_join(p->thread, NULL);
  http__job *left = p->head;
  pthread_cond_destroy(&p->wake);
  pthread_mutex_destroy(&p->lock);
  handler_image_ctx_free(p->image);
  free(p);
  return left;
}
