// The embeddings routes: /v1/embeddings (OpenAI), /embeddings and /embedding (native). Parse,
// tokenize, submit every input as its own task, wait for all of them, answer in one response
// (server/embeddings.h). A client that goes away cancels the tasks still running.
#include <chrono>

#include "server/conn_watch.h"
#include "server/embeddings.h"
#include "server/http_impl.h"

namespace minfer::server {

void HttpServer::Impl::handle_embeddings(const httplib::Request& req, httplib::Response& res,
                                         bool oai) {
  // llama-server's answers, in its order: the mode before the body is read.
  if (!p.embeddings)
    return send_error(res, ApiError(501, "not_supported_error",
                                    "This server does not support embeddings. Start it with "
                                    "`--embeddings`"));
  if (oai && model.pooling == Pooling::None)
    return send_error(res, bad_request("Pooling type 'none' is not OAI compatible. Please use a "
                                       "different pooling type"));
  EmbeddingsRequest r;
  std::vector<std::shared_ptr<Task>> tasks;
  try {
    r = parse_embeddings(parse_body(req.body), oai, *model.tokenizer, p.embd_normalize);
    tasks = sched->submit_embeddings(r.inputs, EmbedSpec{model.pooling, r.normalize});
  } catch (const ApiError& e) {
    return send_error(res, e);
  }
  in_flight++;
  const int fd = find_connection_socket(req.local_port, req.remote_port);
  std::vector<TaskEvent> finals(tasks.size());
  std::vector<TaskEvent> evs;
  for (size_t i = 0; i < tasks.size(); ++i) {
    while (!finals[i].final) {
      evs.clear();
      tasks[i]->wait(evs, std::chrono::milliseconds(20));
      if (peer_closed(fd)) {  // nobody to answer: free the slots and the queue places
        for (auto& t : tasks) t->cancel();
        in_flight--;
        return;
      }
      for (TaskEvent& ev : evs)
        if (ev.final) finals[i] = std::move(ev);
    }
  }
  in_flight--;
  for (const TaskEvent& ev : finals)
    if (ev.error) return send_error(res, *ev.error);
  send_json(res, embeddings_response(r, finals, model.id, model.n_embd));
}

void HttpServer::Impl::install_embedding_routes() {
  svr.Post("/v1/embeddings", [this](const httplib::Request& q, httplib::Response& s) {
    handle_embeddings(q, s, /*oai=*/true);
  });
  for (const char* path : {"/embeddings", "/embedding"})
    svr.Post(path, [this](const httplib::Request& q, httplib::Response& s) {
      handle_embeddings(q, s, /*oai=*/false);
    });
}

}  // namespace minfer::server
