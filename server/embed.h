/* embed.h - the embedding routes: POST /v1/embed and TEI's own paths (/, /embed, /embed_all),
 * OpenAI's POST /v1/embeddings (all through the scheduler, see embed.c), POST /v1/tokenize and
 * TEI's /tokenize (answered on the MHD thread), and TEI's GET /info. */
#ifndef ADAPTERD_SERVER_EMBED_H
#define ADAPTERD_SERVER_EMBED_H

#include "internal.h"

/* MHD thread, body complete: answers errors at once; otherwise suspends the connection and submits
 * an embed job. */
enum MHD_Result srv__embed(srv_request *r);

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
