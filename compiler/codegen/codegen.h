// codegen.h — what every code generator takes (the options of `ckc compile`) and gives back (model.c, the
// runtime sources it needs, notes for the user): llm_codegen.h and graph_codegen.h.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "planner/planner.h"

namespace ckc {

struct CodegenOptions {
    std::string command_line;              // recorded in the frontmatter
    std::vector<std::string> passes;       // the passes that ran
    std::string runtime_dir;               // absolute path of runtime/
    std::string templates_dir;             // absolute path of templates/
    std::string output_name = "model.c";
    std::string target = "cpu";            // "cpu", or "gcu": the kernels run on the gcu device (runtime/include/gcu.h)
    bool train = false;                    // --train: backward, AdamW and the training ABI (needs a keep_all plan)
    bool standalone = false;               // --standalone: the frontmatter's build lines are the one file's
    std::string embed_name;                // --embed-weights: the file's name and bytes, compiled into model.c
    std::string embed_bytes;               // (empty: none)
    int64_t static_tokens = 0;             // --static --max-tokens N (> 0): every buffer in one block sized for N
    int64_t static_kv = 0;                 //   tokens per call and --kv positions of KV cache (0: none)
};

struct CodegenResult {
    std::string source;                    // model.c
    std::vector<std::string> kernels;      // the runtime .c files it calls, relative to runtime/ (ckc compile adds
                                           // those whose private headers they include: tools/standalone.h)
    std::string training_report;           // --train: the training memory (saved activations, gradients)
    std::vector<std::string> notes;        // worth telling the user (a stored format's fallbacks)
};

}  // namespace ckc
