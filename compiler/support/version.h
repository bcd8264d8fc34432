#pragma once
#define CKC_VERSION "0.1.0"
