import Foundation
import WorkerApp

exit(await Workers.webhooks())
