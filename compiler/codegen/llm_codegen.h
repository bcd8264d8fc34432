// llm_codegen.h — Program + Plan -> model.c (templates/llm_model.c.in) and
// the list of runtime sources it needs (model.c.kernels).
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
};

struct CodegenResult {
    std::string source;                    // model.c
    std::vector<std::string> kernels;      // absolute paths of runtime .c files
    std::string training_report;           // --train: the training memory (saved activations, gradients)
    std::vector<std::string> notes;        // worth telling the user (a stored format's fallbacks)
};

CodegenResult generate_llm_c(const Program &p, const Plan &plan, const CodegenOptions &o);

}  // namespace ckc
