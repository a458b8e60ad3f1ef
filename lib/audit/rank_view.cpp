#include "audit/rank_view.h"
