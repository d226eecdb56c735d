/* embed.h - the job of an embedding request, and the routes answered on the MHD thread beside it:
 * POST /v1/tokenize and TEI's /tokenize, TEI's /decode and GET /info (see embed.c). */
#ifndef ADAPTERD_SERVER_EMBED_H
#define ADAPTERD_SERVER_EMBED_H

#include "internal.h"

/* Reads what embeddings need from each model's folder (its pooling, its sentence-transformers prompts)
 * once, at start-up, into s. Returns 0 or ENG_NO_MEMORY; srv__model_files_free releases it (also after
 * a failure). */
int srv__model_files_load(srv_server *s);
void srv__model_files_free(srv_server *s);

/* Builds embed job j (its model reference set by front.c) from f's decoded request: pooling, prompt,
 * truncation, tokenization. Returns 0, or -1 with f->code and f->msg set. */
int srv__embed_job(srv_front *f, srv_job *j);

/* MHD thread, body complete: tokenizes the inputs and answers. */
enum MHD_Result srv__tokenize(srv_request *r);

/* MHD thread: GET /info, TEI's description of the model it serves (the registry's only model, or
 * its first). */
enum MHD_Result srv__tei_info(srv_request *r);

/* MHD thread, body complete: TEI's POST /decode, token ids back to text (WordPiece: "##" pieces
 * joined to the token before, others after a space; special tokens skipped unless asked; then
 * Hugging Face's clean_up_tokenization_spaces). */
enum MHD_Result srv__tei_decode(srv_request *r);

#endif
