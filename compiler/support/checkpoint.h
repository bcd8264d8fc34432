// checkpoint.h — a checkpoint (safetensors or GGUF) opened with the runtime's
// reader for the compiler's use, closed when it goes out of scope; a file the
// reader rejects is an Error with the reader's message.
#pragma once

#include <string>

#include "ck_checkpoint.h"
#include "support/error.h"

namespace ckc {

struct CheckpointFile {
    ck_checkpoint *ck = nullptr;
    explicit CheckpointFile(const std::string &path, ErrorKind kind = ErrorKind::Input)
    {
        char err[1024] = "";
        ck = ck_checkpoint_open(path.c_str(), err, sizeof err);
        if (!ck) throw Error(kind, err);
    }
    ~CheckpointFile() { ck_checkpoint_close(ck); }
    CheckpointFile(const CheckpointFile &) = delete;
    CheckpointFile &operator=(const CheckpointFile &) = delete;
    const ck_tensor_info *find(const std::string &name) const { return ck_checkpoint_find(ck, name.c_str()); }
};

}  // namespace ckc
